#!/bin/sh
# cli_train_corrupt.sh GRADUS DIR — runs `gradus train` on a dataset directory whose image
# files have a corrupt header, for the test of the same name (CMakeLists.txt): 16 bytes
# declaring 4 images of 2^31 x 2^31, a product that wraps to 0 in 64 bits, beside valid
# files of 4 labels. The error must name the file and what is wrong with it.
set -e
gradus=$1
dir=$2
mkdir -p "$dir"
cd "$dir"
printf '\000\000\010\003\000\000\000\004\200\000\000\000\200\000\000\000' > train-images-idx3-ubyte
printf '\000\000\010\001\000\000\000\004\001\002\003\004' > train-labels-idx1-ubyte
cp train-images-idx3-ubyte t10k-images-idx3-ubyte
cp train-labels-idx1-ubyte t10k-labels-idx1-ubyte
set +e
"$gradus" train cnn --data "$dir" 2>&1
echo "exit=$?"
