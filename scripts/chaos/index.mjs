#!/usr/bin/env node
// `npm run chaos [-- options]`: the recipe fault suite (run.mjs), or with --load the sample app
// under purchase load (load.mjs), or with --schedules N / --schedule-seconds S / --seeds randomized
// fault schedules (schedule/main.mjs), or with --simulations N / --simulation-seconds S the session
// simulation on virtual time (../simulation/main.mjs). Each file's header lists its options.
const simulated = process.argv.some((a) => /^--(simulations|simulation-seconds)(=|$)/.test(a));
const scheduled = process.argv.some((a) => /^--(schedules|schedule-seconds|seeds)(=|$)/.test(a));
await import(simulated ? '../simulation/main.mjs' : scheduled ? './schedule/main.mjs' : process.argv.includes('--load') ? './load.mjs' : './run.mjs');
