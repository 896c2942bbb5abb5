#!/usr/bin/env node
// Writes each row of a digit-recognizer CSV (label,pixel0,...,pixel783) as a gray 28x28 PNG named
// by its label and row: <out>/<label>_<row, 5 digits, 0-based>.png (row i = digit_csv sample i).
// Usage: node csv_to_png.js <train.csv> <output dir>
//
// The PNG writer is written out here instead of using zlib so that every byte is defined by this
// file alone: the image data goes in "stored" (uncompressed) deflate blocks, which every zlib and
// every PNG reader accepts, and whose bytes do not change with the zlib build that node links
// (Debian's system zlib and node's bundled Chromium zlib compress differently). The cost is size:
// 880 bytes per digit instead of ~300, 7 MB for 8,000 files.
'use strict';
const fs = require('fs');
const path = require('path');

const SIDE = 28, PIXELS = SIDE * SIDE;

function fail(msg) {
  process.stderr.write('csv_to_png.js: ' + msg + '\n');
  process.exit(1);
}

const CRC_TABLE = (() => {
  const t = new Uint32Array(256);
  for (let n = 0; n < 256; n++) {
    let c = n;
    for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
    t[n] = c >>> 0;
  }
  return t;
})();

function crc32(buf) {
  let c = 0xffffffff;
  for (let i = 0; i < buf.length; i++) c = CRC_TABLE[(c ^ buf[i]) & 0xff] ^ (c >>> 8);
  return (c ^ 0xffffffff) >>> 0;
}

function adler32(buf) {
  let a = 1, b = 0;
  for (let i = 0; i < buf.length; i++) {
    a = (a + buf[i]) % 65521;
    b = (b + a) % 65521;
  }
  return ((b << 16) | a) >>> 0;
}

// A PNG chunk: length, type, data, CRC of type + data.
function chunk(type, data) {
  const out = Buffer.alloc(12 + data.length);
  out.writeUInt32BE(data.length, 0);
  out.write(type, 4, 'ascii');
  data.copy(out, 8);
  out.writeUInt32BE(crc32(out.subarray(4, 8 + data.length)), 8 + data.length);
  return out;
}

// A zlib stream of stored blocks (RFC 1950/1951): header, blocks of <= 65535 bytes, adler32.
function zlibStored(raw) {
  const parts = [Buffer.from([0x78, 0x01])];
  for (let off = 0; off < raw.length || off === 0; off += 65535) {
    const len = Math.min(65535, raw.length - off);
    const head = Buffer.alloc(5);
    head[0] = off + len >= raw.length ? 1 : 0;  // BFINAL on the last block, BTYPE 00 (stored)
    head.writeUInt16LE(len, 1);
    head.writeUInt16LE(~len & 0xffff, 3);
    parts.push(head, raw.subarray(off, off + len));
    if (len === 0) break;
  }
  const tail = Buffer.alloc(4);
  tail.writeUInt32BE(adler32(raw), 0);
  parts.push(tail);
  return Buffer.concat(parts);
}

const SIGNATURE = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);

// An 8-bit grayscale PNG (color type 0), every row with filter type 0 (none).
function grayPng(pixels, width, height) {
  const ihdr = Buffer.alloc(13);
  ihdr.writeUInt32BE(width, 0);
  ihdr.writeUInt32BE(height, 4);
  ihdr[8] = 8;   // bit depth
  ihdr[9] = 0;   // gray; compression, filter and interlace methods stay 0
  const raw = Buffer.alloc(height * (width + 1));
  for (let y = 0; y < height; y++) pixels.copy(raw, y * (width + 1) + 1, y * width, (y + 1) * width);
  return Buffer.concat([SIGNATURE, chunk('IHDR', ihdr), chunk('IDAT', zlibStored(raw)), chunk('IEND', Buffer.alloc(0))]);
}

function main() {
  const [csv, outDir] = process.argv.slice(2);
  if (!csv || !outDir) fail('usage: node csv_to_png.js <train.csv> <output dir>');
  const lines = fs.readFileSync(csv, 'latin1').split('\n');
  if (!lines[0].startsWith('label,pixel0')) fail(csv + ':1: expected the header label,pixel0,...');
  fs.mkdirSync(outDir, { recursive: true });
  const pixels = Buffer.alloc(PIXELS);
  let rows = 0;
  for (let i = 1; i < lines.length; i++) {
    const line = lines[i].replace(/\r$/, '');
    if (line === '') continue;
    const f = line.split(',');
    if (f.length !== PIXELS + 1) fail(csv + ':' + (i + 1) + ': ' + f.length + ' values, expected ' + (PIXELS + 1));
    const label = Number(f[0]);
    if (!Number.isInteger(label) || label < 0 || label > 9) fail(csv + ':' + (i + 1) + ': bad label ' + f[0]);
    for (let p = 0; p < PIXELS; p++) {
      const v = Number(f[p + 1]);
      if (!Number.isInteger(v) || v < 0 || v > 255) fail(csv + ':' + (i + 1) + ': bad pixel ' + f[p + 1]);
      pixels[p] = v;
    }
    const name = label + '_' + String(rows).padStart(5, '0') + '.png';
    fs.writeFileSync(path.join(outDir, name), grayPng(pixels, SIDE, SIDE));
    rows++;
  }
  process.stdout.write('csv_to_png.js: wrote ' + rows + ' PNG files to ' + outDir + '\n');
}

main();
