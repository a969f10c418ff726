#!/usr/bin/env node
// Carries one fix to the `zookeeper` addon (7.3.0) and rebuilds it; runs as this package's
// postinstall, and by hand: `node node_modules/nestjs-zk-lock/scripts/patch-zookeeper-addon.cjs`.
//
// The defect: when the C client closes its socket inside zookeeper_interest() (receive timeout on a
// silent link or after a process stall, or a connect() that fails at once) it returns an error,
// and the addon's yield() returns early, keeping its poll handle and the closed descriptor's number.
// Node then gives that number to a new socket (an HTTP connection, a new ZooKeeper session) and
// libuv registers it. At the next reconnect the C client's new socket has another number, so the
// addon closes the old poll handle, and libuv removes "its" descriptor from epoll: the new owner's
// socket. That socket hears nothing any more (a hung request, or a ZooKeeper session that never
// reconnects), and the next time libuv changes its interest it gets ENOENT from EPOLL_CTL_MOD and
// calls abort() (SIGABRT, nothing logged).
//
// The fix: on that error, close the poll handle at once (the descriptor was closed in this very
// call, so its number cannot belong to anyone else yet) and forget the number.
//
// Two more changes on the same early returns of yield(), which never restarted the addon's timer,
// so the next connection attempt waited for the repeating timer's old period (a third of the
// session timeout, 5 s for 15 s) instead of the delay the C client asked for: after such an error
// the addon now tries again in 10 ms, and when the C client has tried every server and asks to wait
// (a 60th of the timeout) it waits that long. This is most of what a leader loss cost under load.
//
// The same defect through the other door: any async call (a_create, a_get, ...) can make the C
// client close its socket when its send fails (nonblocking_send: e.g. the server dropped the
// connection while the process was stopped), while the addon's poll handle is queued for that
// descriptor; libuv then adds the closed descriptor to epoll (EBADF) and aborts (seen with a core
// dump: uv__epoll_ctl_prep, EPOLL_CTL_ADD, after SIGCONT). The addon now drops its poll handle after
// every async call that left the handle not connected.
//
// A create with an ACL (a_create_acl): the binding's a_create always sends world:anyone:cdrwa, so
// with \`auth\` configured any client could write to our lock nodes (a forged revoke request, or
// someone else's holder data); creating each node with its parent's ACL leaves no moment when it is open.
//
// Host names are resolved again at most once a minute while connected (and at every reconnect, as
// before): the C client starts with a resolution delay of 0, which re-resolves the connect string
// (getaddrinfo with AI_ADDRCONFIG: a netlink dump of the interfaces, plus /dev/urandom for the
// shuffle) in every zookeeper_interest(), that is for every request and every reply. It was half of
// the client's CPU per lock cycle.
//
// Replies are read until the socket has none left (at most 256) in each readable callback: the C
// client reads one reply per zookeeper_process() call, so the addon took one reply per turn of the
// event loop, and in a busy process (an HTTP service under load) replies queued in the socket. With
// the sample app at 200 concurrent buyers (bench/app.mjs's load) the median acquire waited 344-546 ms
// while the server answered in under a millisecond; 41-67 ms with this change, and 29-35 % more
// purchases per second at 23 % less CPU per purchase.
//
// And the C client is configured with --with-sock-cloexec: its sockets are close-on-exec, so a
// child process spawned by the app no longer inherits them (while such a child lived, the client
// could not reconnect, and the addon could declare a live session expired).
//
// The rebuilt addon carries a marker constant, ZooKeeper.NESTJS_ZK_LOCK_FD_FIX (the fix's version),
// which the library checks.
'use strict';
const { spawnSync } = require('node:child_process');
const fs = require('node:fs');
const path = require('node:path');

const MARKER = 'NESTJS_ZK_LOCK_FD_FIX';
const FIX_VERSION = 8;
const ADDON_HUNKS = [
  {
    before: `        if (rc) {
            LOG_ERROR("yield:zookeeper_interest returned error: %d - %s\\n", rc, zerror(rc));
            return;
        }

        if (fd == -1 ) {
            if (zk_io) {
                uv_close((uv_handle_t*) zk_io, delete_on_close);
                zk_io = NULL;
            }
            return;
        }`,
    after: `        if (rc) {
            LOG_ERROR("yield:zookeeper_interest returned error: %d - %s\\n", rc, zerror(rc));
            // ${MARKER}: the C client may have closed its socket in this call. Close the poll
            // handle now, while no one else can own the descriptor's number; closing it later
            // would remove whichever socket got that number from epoll (libuv then aborts).
            if (zk_io) {
                uv_close((uv_handle_t*) zk_io, delete_on_close);
                zk_io = NULL;
            }
            fd = -1;
            // ${MARKER}: and try again soon, as the C client asks (it zeroed tv), unless the
            // session is over; the repeating timer would wait up to a third of the timeout.
            int state = zoo_state(zhandle);
            if (state != ZOO_EXPIRED_SESSION_STATE && state != ZOO_AUTH_FAILED_STATE) {
                uv_timer_start(&zk_timer, &zk_timer_cb, NESTJS_ZK_LOCK_RETRY_MS, NESTJS_ZK_LOCK_RETRY_MS);
            }
            return;
        }

        if (fd == -1 ) {
            if (zk_io) {
                uv_close((uv_handle_t*) zk_io, delete_on_close);
                zk_io = NULL;
            }
            // ${MARKER}: no socket (every server failed): come back when the C client asked
            // (tv, a 60th of the timeout), not at the repeating timer's next tick (a third).
            int64_t wait = tv.tv_sec * 1000 + tv.tv_usec / 1000;
            if (wait < NESTJS_ZK_LOCK_RETRY_MS) wait = NESTJS_ZK_LOCK_RETRY_MS;
            uv_timer_start(&zk_timer, &zk_timer_cb, wait, wait);
            return;
        }`,
  },
  {
    before: `#define METHOD_EPILOG(call) \\
        int ret = (zk->zhandle ? (call) : ZINVALIDSTATE); \\
        RETURN_VALUE(info, Nan::New<Int32>(ret))`,
    after: `#define METHOD_EPILOG(call) \\
        int ret = (zk->zhandle ? (call) : ZINVALIDSTATE); \\
        zk->dropClosedSocket(); \\
        RETURN_VALUE(info, Nan::New<Int32>(ret))`,
  },
  {
    before: `    void yield () {`,
    after: `    // ${MARKER}: every async call (a_create, a_get, ...) ends here. A send that fails inside it
    // makes the C client close its socket at once (nonblocking_send) and mark the handle not
    // connected; drop the poll handle now, before libuv adds the closed descriptor to epoll (EBADF:
    // abort) or another socket takes its number, and reconnect through the timer.
    void dropClosedSocket () {
        if (is_closed || !zhandle || (!zk_io && fd == -1) || zoo_state(zhandle) != ZOO_NOTCONNECTED_STATE) return;
        if (zk_io) {
            uv_close((uv_handle_t*) zk_io, delete_on_close);
            zk_io = NULL;
        }
        fd = -1;
        tv.tv_sec = 0;
        tv.tv_usec = 0;
        uv_timer_start(&zk_timer, &zk_timer_cb, NESTJS_ZK_LOCK_RETRY_MS, NESTJS_ZK_LOCK_RETRY_MS);
    }

    void yield () {`,
  },
  {
    before: `    static void ACreateTtl(const Nan::FunctionCallbackInfo<Value>& info) {`,
    after: `    // ${MARKER}: create with an ACL: a_create_acl(path, data, flags, [{ perm, scheme, auth }], cb).
    // The C client serializes the request (ACL included) before zoo_acreate returns.
    static void ACreateAcl(const Nan::FunctionCallbackInfo<Value>& info) {
        A_METHOD_PROLOG(5);

        Nan::Utf8String _path (toString(info[0]));
        Local<Object> _data = toLocalObj(info[1]);
        uint32_t flags = toUint(info[2]);
        struct ACL_vector *aclv = zk->createAclVector(Local<Array>::Cast(info[3]));
        int ret = zk->zhandle ? zoo_acreate(zk->zhandle, *_path, BufferData(_data), BufferLength(_data), aclv, flags, string_completion, cb) : ZINVALIDSTATE;
        deallocate_ACL_vector(aclv);
        free(aclv);
        zk->dropClosedSocket();
        RETURN_VALUE(info, Nan::New<Int32>(ret));
    }

    static void ACreateTtl(const Nan::FunctionCallbackInfo<Value>& info) {`,
  },
  {
    before: `        Nan::SetPrototypeMethod(constructor_template,  "a_create",  ACreate);\n`,
    after: `        Nan::SetPrototypeMethod(constructor_template,  "a_create",  ACreate);\n        Nan::SetPrototypeMethod(constructor_template,  "a_create_acl",  ACreateAcl);\n`,
  },
  {
    before: `        zhandle = zookeeper_init(hostPort, main_watcher, session_timeout, &myid, this, 0);
        if (!zhandle) {
            LOG_ERROR("zookeeper_init returned 0!");
            return false;
        }`,
    after: `        zhandle = zookeeper_init(hostPort, main_watcher, session_timeout, &myid, this, 0);
        if (!zhandle) {
            LOG_ERROR("zookeeper_init returned 0!");
            return false;
        }
        // ${MARKER}: resolve the hosts again at most once a minute while connected (always on a
        // reconnect); the default (0) resolves them for every request and every reply.
        zoo_set_servers_resolution_delay(zhandle, NESTJS_ZK_LOCK_RESOLVE_DELAY_MS);`,
  },
  {
    before: `        int rc = zookeeper_process (zk->zhandle, events);

        if (rc == ZOK) {`,
    after: `        int rc = zookeeper_process (zk->zhandle, events);
        // ${MARKER}: the C client reads one reply per zookeeper_process() call, i.e. one per turn
        // of the event loop: take the replies the socket already holds (at most 256) in this one.
        if (rc == ZOK && (events & ZOOKEEPER_READ)) {
            for (int more = 0; more < 256 && !zk->is_closed && zk->zhandle; more++) {
                if (zookeeper_process (zk->zhandle, ZOOKEEPER_READ) != ZOK) break;
            }
            if (zk->is_closed || !zk->zhandle) return;
        }

        if (rc == ZOK) {`,
  },
  {
    before: `        NODE_DEFINE_CONSTANT(constructor, ZSESSIONMOVED);\n`,
    after: `        NODE_DEFINE_CONSTANT(constructor, ZSESSIONMOVED);\n        NODE_DEFINE_CONSTANT(constructor, ${MARKER});\n`,
  },
];
const DEFINE = `#define ${MARKER} ${FIX_VERSION}\n#define NESTJS_ZK_LOCK_RETRY_MS 10\n#define NESTJS_ZK_LOCK_RESOLVE_DELAY_MS 60000\n`;
/** The prefix an older version of the fix wrote. */
const OLD_PREFIX = new RegExp(`^#define ${MARKER} \\d+\\n#define NESTJS_ZK_LOCK_RETRY_MS 10\\n(#define NESTJS_ZK_LOCK_RESOLVE_DELAY_MS \\d+\\n)?`);
// The C client's own build: sockets with close-on-exec, so that a child process does not inherit them.
const BUILD_HUNKS = [
  {
    before: "--with-pic --without-cppunit`;",
    after: "--with-pic --without-cppunit --with-sock-cloexec`;",
  },
];

function log(message) {
  console.log(`nestjs-zk-lock: ${message}`);
}

function addonDir() {
  // From the installing project first (npm hoists `zookeeper` next to us), then from this package.
  for (const from of [process.env.INIT_CWD, process.cwd(), __dirname]) {
    if (!from) continue;
    try {
      return path.dirname(require.resolve('zookeeper/package.json', { paths: [from] }));
    } catch {}
  }
  return undefined;
}

function isFixed(dir) {
  const load = `require(require.resolve('node-gyp-build', { paths: [${JSON.stringify(dir)}] }))(${JSON.stringify(dir)})`;
  const probe = spawnSync(process.execPath, ['-p', `${load}.ZooKeeper.${MARKER}`], { encoding: 'utf8' });
  return probe.stdout.trim() === String(FIX_VERSION);
}

/**
 * Applies `hunks` to `file` (`prefix` first); false if the file does not match them. A file an
 * older version of this fix patched gets the hunks it lacks, and its old prefix replaced.
 */
function patchFile(file, hunks, prefix = '') {
  let source = fs.readFileSync(file, 'utf8');
  if (hunks.every(({ after }) => source.includes(after)) && source.startsWith(prefix)) return true;
  const missing = hunks.filter(({ after }) => !source.includes(after));
  for (const { before } of missing) if (!source.includes(before)) return false;
  for (const { before, after } of missing) source = source.replace(before, after);
  if (prefix && !source.startsWith(prefix)) source = prefix + source.replace(OLD_PREFIX, '');
  // A new file, not an in-place write: package managers may hard-link this file from a shared store.
  const next = `${file}.${process.pid}.tmp`;
  fs.writeFileSync(next, source);
  fs.renameSync(next, file);
  return true;
}

function nodeGyp() {
  if (process.env.npm_config_node_gyp) return process.env.npm_config_node_gyp;
  const besideNode = path.join(path.dirname(process.execPath), '..', 'lib', 'node_modules', 'npm', 'node_modules', 'node-gyp', 'bin', 'node-gyp.js');
  return fs.existsSync(besideNode) ? besideNode : undefined;
}

function main() {
  const dir = addonDir();
  if (!dir) return log('the zookeeper package is not installed; nothing to patch');
  const version = JSON.parse(fs.readFileSync(path.join(dir, 'package.json'), 'utf8')).version;
  if (isFixed(dir)) return log(`zookeeper ${version} addon already carries the descriptor fix`);
  if (!patchFile(path.join(dir, 'src', 'node-zk.cpp'), ADDON_HUNKS, DEFINE) || !patchFile(path.join(dir, 'scripts', 'build.js'), BUILD_HUNKS)) {
    return warn(`zookeeper ${version}: its source does not match the fix (made for 7.3.0); not patched`);
  }
  const gyp = nodeGyp();
  if (!gyp) return warn('node-gyp not found; the zookeeper addon was patched but not rebuilt');
  // `build` reuses the Makefile the addon's own install configured; without one, configure first.
  const command = fs.existsSync(path.join(dir, 'build', 'Makefile')) ? 'build' : 'rebuild';
  log(`rebuilding the zookeeper ${version} addon with the descriptor fix (node-gyp ${command})`);
  // The C client first (its configure flag changed; make recompiles what config.h reaches), then
  // the addon, which links it. The addon's own gyp action would not run the C build again.
  const quiet = { cwd: dir, stdio: ['ignore', 'ignore', 'inherit'] };
  const client = spawnSync(process.execPath, [path.join('scripts', 'build.js')], quiet);
  const built = client.status === 0 && spawnSync(process.execPath, [gyp, command], quiet);
  if (!built || built.status !== 0 || !isFixed(dir)) return warn('rebuilding the zookeeper addon failed');
  log('the zookeeper addon carries the descriptor fix');
}

function warn(message) {
  console.warn(`nestjs-zk-lock: WARNING: ${message}. Without the fix a ZooKeeper connection timeout can ` +
    'abort the process (see "Known limitations" in the README). The install goes on.');
}

main();
