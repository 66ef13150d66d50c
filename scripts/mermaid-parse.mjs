#!/usr/bin/env node
// Parses Mermaid diagrams with Mermaid's own parser (npm package `mermaid`, installed into .tools/ by
// scripts/setup.sh), the code GitHub runs before it draws one. Usage: node scripts/mermaid-parse.mjs FILE...
// Each FILE is Markdown: every ```mermaid block in it is parsed. Prints one JSON array of
// {file, block, type, error}; exits 1 when any block fails to parse or a file holds none.
// mermaid sanitises labels with DOMPurify, which needs a DOM: jsdom provides one (no browser, no network).
import fs from "node:fs";
import path from "node:path";
import { createRequire } from "node:module";
import { fileURLToPath, pathToFileURL } from "node:url";

const tools = path.join(path.dirname(fileURLToPath(import.meta.url)), "..", ".tools");
const require = createRequire(path.join(tools, "package.json"));
const { JSDOM } = require("jsdom");
const { window } = new JSDOM("<!doctype html><html><body></body></html>");
globalThis.window = window;
globalThis.document = window.document;
const { default: mermaid } = await import(pathToFileURL(require.resolve("mermaid")).href);
mermaid.initialize({ startOnLoad: false });

const results = [];
for (const file of process.argv.slice(2)) {
  const blocks = [...fs.readFileSync(file, "utf8").matchAll(/^```mermaid\n([\s\S]*?)^```$/gm)].map((m) => m[1]);
  if (blocks.length === 0) results.push({ file, block: null, type: null, error: "no mermaid block" });
  for (const [block, text] of blocks.entries()) {
    try {
      const { diagramType } = await mermaid.parse(text);
      results.push({ file, block, type: diagramType, error: null });
    } catch (error) {
      results.push({ file, block, type: null, error: String(error.message || error) });
    }
  }
}
process.stdout.write(JSON.stringify(results, null, 2) + "\n");
process.exit(results.every((r) => r.error === null) ? 0 : 1);
