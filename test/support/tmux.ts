// A command in a terminal for tests of terminal views: a tmux server of its own (its socket in a
// temp folder, no user config), one detached pane of a fixed size, read with capture-pane.
import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';

const run = promisify(execFile);

export class TmuxPane {
  private constructor(
    private readonly dir: string,
    private readonly socket: string,
  ) {}

  /** Runs `command` (a shell command line) in a new pane of `columns` × `rows`; its folder is `dir`, a new temp folder. */
  static async start(command: (dir: string) => string, { columns = 160, rows = 40 } = {}): Promise<TmuxPane> {
    const dir = mkdtempSync(join(tmpdir(), 'nestjs-zk-lock-tmux-'));
    const pane = new TmuxPane(dir, join(dir, 'socket'));
    const env = { PATH: process.env.PATH, TERM: 'xterm-256color', HOME: dir };
    await run('tmux', ['-S', pane.socket, '-f', '/dev/null', 'new-session', '-d', '-x', String(columns), '-y', String(rows), '-c', dir, command(dir)], { env });
    return pane;
  }

  /** The folder the command runs in (a place for the files it writes). */
  get folder(): string {
    return this.dir;
  }

  /** What the pane shows now, one string per line (trailing blanks trimmed). */
  async screen(): Promise<string> {
    return (await this.tmux('capture-pane', '-p')).stdout;
  }

  /** Types `keys` (tmux key names: `q`, `C-c`). */
  async sendKeys(...keys: string[]): Promise<void> {
    await this.tmux('send-keys', ...keys);
  }

  /** A tmux format of the pane, e.g. `#{cursor_flag}` (1 when the cursor shows), `#{pane_tty}`. */
  async display(format: string): Promise<string> {
    return (await this.tmux('display-message', '-p', format)).stdout.trim();
  }

  /** Stops this tmux server (and what still runs in its pane) and removes the folder. */
  async close(): Promise<void> {
    await this.tmux('kill-server').catch(() => undefined);
    rmSync(this.dir, { recursive: true, force: true });
  }

  private tmux(...args: string[]) {
    return run('tmux', ['-S', this.socket, ...args]);
  }
}
