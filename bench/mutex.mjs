// Kept so that `npm run bench` (package.json: `npm run build && node bench/mutex.mjs`) still
// works; the benchmark lives in bench/run.mjs (same options, e.g. `npm run bench -- --quick`).
import './run.mjs';
