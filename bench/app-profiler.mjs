// Preloaded into one sample-app instance by `bench/run.mjs --only app --profile`
// (`node --import ./bench/app-profiler.mjs sample-app/dist/main.js`): V8's sampling profiler over
// a window the bench chooses, not start-up. SIGWINCH starts it; the next SIGWINCH stops it and
// writes the profile to $APP_CPU_PROFILE (written to a temporary name, then renamed, so that the
// bench can wait for the file). SIGWINCH because Nest's shutdown hooks take SIGUSR2 (and SIGUSR1
// opens Node's inspector port); without this module its default action is to be ignored.
import { renameSync, writeFileSync } from 'node:fs';
import { Session } from 'node:inspector';

const file = process.env.APP_CPU_PROFILE;
if (file) {
  const session = new Session();
  session.connect();
  const post = (method, params = {}) =>
    new Promise((resolve, reject) => session.post(method, params, (error, result) => (error ? reject(error) : resolve(result))));
  let running = false;
  process.on('SIGWINCH', async () => {
    try {
      if (!running) {
        running = true;
        await post('Profiler.enable');
        await post('Profiler.setSamplingInterval', { interval: 100 });
        await post('Profiler.start');
      } else {
        running = false;
        const { profile } = /** @type {any} */ (await post('Profiler.stop'));
        writeFileSync(`${file}.tmp`, JSON.stringify(profile));
        renameSync(`${file}.tmp`, file);
      }
    } catch (error) {
      process.stderr.write(`app-profiler: ${error}\n`);
    }
  });
}
