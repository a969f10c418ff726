#!/usr/bin/env node
// `npm run chaos [-- options]`: the recipe fault suite (run.mjs), or with --load the sample app
// under purchase load (load.mjs), or with --schedules N / --schedule-seconds S / --seeds randomized
// fault schedules (schedule/main.mjs). Each file's header lists its options.
const scheduled = process.argv.some((a) => /^--(schedules|schedule-seconds|seeds)(=|$)/.test(a));
await import(scheduled ? './schedule/main.mjs' : process.argv.includes('--load') ? './load.mjs' : './run.mjs');
