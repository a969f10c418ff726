#!/usr/bin/env node
// `npm run chaos [-- options]`: the recipe fault suite (run.mjs), or with --load the sample app
// under purchase load (load.mjs). Each file's header lists its options.
await import(process.argv.includes('--load') ? './load.mjs' : './run.mjs');
