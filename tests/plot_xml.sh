#!/bin/sh
# `gradus plot` writes well-formed SVG by an XML parser not written here (Python's
# xml.etree), on a log like the language-model trainer's: skipped (77) without python3.
# usage: plot_xml.sh GRADUS BUILD_DIR
command -v python3 > /dev/null 2>&1 || { echo "no python3: skipped"; exit 77; }
T=$(mktemp -d "$2/plot_xml.XXXXXX") || exit 1
i=1
while [ $i -le 300 ]; do
    echo "{\"step\": $i, \"loss\": $((3000 - i)).5e-3, \"lr\": 3e-4, \"grad_norm\": 1.$i, \"tokens_per_s\": 5$i, \"elapsed_s\": $i}"
    [ $((i % 50)) -eq 0 ] && echo "{\"step\": $i, \"val_loss\": $((3100 - i))e-3}"
    i=$((i + 1))
done > "$T/metrics.jsonl"
"$1" plot "$T/metrics.jsonl" -o "$T/curves.svg" --title 'a <title> & "quotes"' || exit 1
python3 - "$T/curves.svg" <<'PY' || exit 1
import sys, xml.etree.ElementTree as ET
root = ET.parse(sys.argv[1]).getroot()
ns = "{http://www.w3.org/2000/svg}"
assert root.tag == ns + "svg", root.tag
texts = ["".join(t.itertext()) for t in root.iter(ns + "text")]
for want in ("training loss", "validation loss", "learning rate", "tokens/s", "grad_norm", "step"):
    assert any(want in t for t in texts), want
assert any('a <title> & "quotes"' == t for t in texts), "title"
assert len(list(root.iter(ns + "polyline"))) >= 5
print("plot_xml: ok")
PY
rm -rf "$T"
