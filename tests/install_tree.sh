#!/bin/sh
# The installed tree, as a user gets it from `cmake --install BUILD --prefix P`:
#  - pkg-config, seeing only P's gradus.pc, gives -I and -L inside P, and still does after
#    the whole tree is moved elsewhere (the .pc file is relative to itself);
#  - examples/train_mlp.c compiles and links with those flags, and runs;
#  - a plugin put in P's plugin directory is found by P's `gradus` (relative to itself)
#    and by a program linked to P's libgradus (beside the library), moved tree included;
#  - no installed file contains the build tree's path (debug sections aside): nothing
#    installed looks for plugins there.
#
#   usage: install_tree.sh CMAKE BUILD_DIR SOURCE_DIR CC [CFLAGS]
set -u
CMAKE=$1
B=$2
S=$3
CC=$4
XFLAGS=${5:-}
command -v pkg-config > /dev/null 2>&1 || { echo "no pkg-config: skipped"; exit 77; }
command -v strings > /dev/null 2>&1 || { echo "no strings: skipped"; exit 77; }
T=$(mktemp -d "${TMPDIR:-/tmp}/gradus-install.XXXXXX") || exit 1
trap 'rm -rf "$T"' EXIT
unset GRADUS_PLUGIN_PATH GRADUS_BACKEND GRADUS_DISABLE PKG_CONFIG_PATH
failed=0
fail() {
    failed=$((failed + 1))
    echo "FAIL: $*"
}
# The physical path of directory $1 ("" if it does not exist).
real() { (cd "$1" 2> /dev/null && pwd -P); }

P=$T/prefix
if ! "$CMAKE" --install "$B" --prefix "$P" > "$T/install.log" 2>&1; then
    cat "$T/install.log"
    fail "cmake --install --prefix $P"
    exit 1
fi

# pkg-config: every -I and -L lies inside the prefix
check_pc() {
    root=$(real "$1")
    pc=$(find "$1" -name gradus.pc | head -n 1)
    [ -n "$pc" ] || { fail "no gradus.pc under $1"; return; }
    export PKG_CONFIG_LIBDIR="${pc%/*}"
    flags="$(pkg-config --cflags gradus) $(pkg-config --libs gradus)" || { fail "pkg-config gradus"; return; }
    n=0
    for f in $flags; do
        case $f in
        -I* | -L*)
            d=$(real "${f#-?}")
            n=$((n + 1))
            case $d in
            "$root"/*) ;;
            *) fail "pkg-config gives $f, which is not inside $root" ;;
            esac
            ;;
        esac
    done
    [ "$n" -ge 2 ] || fail "pkg-config gives no -I and -L: $flags"
    # a static link needs OpenBLAS when libgradus.a calls it
    libdir=$(pkg-config --variable=libdir gradus)
    if nm "$libdir/libgradus.a" 2> /dev/null | grep -q ' U cblas_sgemm'; then
        pkg-config --static --libs gradus | grep -q -- -lopenblas || fail "Libs.private lacks -lopenblas"
    fi
}
check_pc "$P"

# the example, built against the installed tree only
libdir=$(pkg-config --variable=libdir gradus)
# shellcheck disable=SC2046,SC2086
if $CC $XFLAGS $(pkg-config --cflags gradus) -o "$T/train_mlp" "$S/examples/train_mlp.c" \
    $(pkg-config --libs gradus) -lm > "$T/cc.log" 2>&1; then
    LD_LIBRARY_PATH=$libdir "$T/train_mlp" > "$T/run.log" 2>&1
    grep -q 'test accuracy: 0\.[3-9]' "$T/run.log" || { cat "$T/run.log"; fail "the installed example did not train"; }
else
    cat "$T/cc.log"
    fail "examples/train_mlp.c does not build against the installed tree"
fi

# plugin discovery inside the installed tree: the command, and a program linked to the
# installed library
cat > "$T/backends.c" << 'EOF'
#include <gradus.h>
#include <stdio.h>
int main(void)
{
    gd_ctx *ctx;
    if (gd_ctx_create(&ctx, NULL) != GD_OK) return 1;
    for (int i = 0; i < gd_backend_count(ctx); i++) printf("backend %s\n", gd_backend_name(ctx, i));
    gd_ctx_free(ctx);
    return 0;
}
EOF
# shellcheck disable=SC2046,SC2086
$CC $XFLAGS $(pkg-config --cflags gradus) -o "$T/backends" "$T/backends.c" $(pkg-config --libs gradus) \
    > "$T/cc.log" 2>&1 || { cat "$T/cc.log"; fail "a program does not build against the installed tree"; }
plugindir=$(pkg-config --variable=plugindir gradus)
mkdir -p "$plugindir" && cp "$B/plugins-test/libgradus_testdev.so" "$plugindir/"
check_plugins() { # PREFIX LIBDIR
    "$1/bin/gradus" devices > "$T/devices.log" 2>&1
    grep -Eq '^testdev +loaded' "$T/devices.log" || { cat "$T/devices.log"; fail "$1/bin/gradus does not find $1's plugins"; }
    LD_LIBRARY_PATH=$2 "$T/backends" > "$T/backends.log" 2>&1
    grep -q '^backend testdev' "$T/backends.log" || { cat "$T/backends.log"; fail "libgradus in $2 does not find the plugins beside it"; }
}
check_plugins "$P" "$libdir"

# the tree moved elsewhere still works: nothing in it names where it was installed
mv "$P" "$T/moved"
check_pc "$T/moved"
check_plugins "$T/moved" "$(pkg-config --variable=libdir gradus)"

# no build-tree path in anything installed (debug information aside, which names where
# the sources were compiled and is never searched)
find "$T/moved" -type f \( -name 'gradus' -o -name 'libgradus*' \) > "$T/files"
[ -s "$T/files" ] || fail "no installed gradus or libgradus found"
while read -r f; do
    if command -v strip > /dev/null 2>&1 && strip --strip-debug -o "$T/stripped" "$f" 2> /dev/null; then
        g=$T/stripped
    else
        g=$f
    fi
    if strings -a "$g" | grep -F -- "$B" > "$T/hits"; then
        fail "$f names the build tree: $(head -n 3 "$T/hits" | tr '\n' ' ')"
    fi
done < "$T/files"

[ "$failed" -eq 0 ] && echo "install_tree: ok"
[ "$failed" -eq 0 ]
