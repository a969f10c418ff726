#!/usr/bin/env node
// Carries one fix to the `zookeeper` addon (7.3.0) and rebuilds it. Run by hand by whoever opts into
// the addon (`client: 'addon'`): `node node_modules/nestjs-zk-lock/scripts/patch-zookeeper-addon.cjs`;
// in this repository `npm test` and `npm run bench` run it first, for the addon's tests (the
// addon is a dev dependency here). The package itself has no lifecycle script: nothing runs on install.
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
// And a_multi: several creates and deletes in one request, applied all or none as one transaction
// (ZooKeeper's multi; the binding had none). The library sends the lock-node writes a session makes
// in one turn of the event loop that way: one request, one reply and one transaction at the server
// instead of one each (see ZkSession's batching).
//
// And a getAcl that fails (NONODE, NOAUTH) no longer kills the process: the addon freed the ACL
// vector the C client passes as NULL then (SIGSEGV).
//
// The rebuilt addon carries a marker constant, ZooKeeper.NESTJS_ZK_LOCK_FD_FIX (the fix's version),
// which the library checks.
'use strict';
const { spawnSync } = require('node:child_process');
const fs = require('node:fs');
const path = require('node:path');

const MARKER = 'NESTJS_ZK_LOCK_FD_FIX';
// The fix's version has one value, package.json's "zookeeperAddonFixVersion": the library reads it too.
const FIX_VERSION = require('../package.json').zookeeperAddonFixVersion;
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
    before: `    static void void_completion (int rc, const void *data) {`,
    after: `    // ${MARKER}: writes applied all or none in one request (one transaction):
    // a_multi([{ type: 1 (create), path, data, flags, acl? } | { type: 2 (delete), path, version }], cb)
    // and cb(rc, error, [{ rc, path? }]): rc is the whole request's; a create's path when it was made.
    // The C client serializes the request before zoo_amulti returns; the results (and the buffers
    // the created paths are copied into) live until the completion.
#define NESTJS_ZK_LOCK_NO_RESULT 1
    struct multi_completion_data {
        Nan::Callback *cb;
        int count;
        zoo_op_result_t *results;
        char **paths;
    };

    static void free_multi (struct multi_completion_data *d) {
        for (int i = 0; i < d->count; i++) free(d->paths[i]);
        free(d->paths);
        free(d->results);
        free(d);
    }

    static void multi_completion (int rc, const void *data) {
        struct multi_completion_data *d = (struct multi_completion_data *) data;
        void *cb = (void *) d->cb;
        {
            CALLBACK_PROLOG(3);
            Local<Array> results = Nan::New<Array>(d->count);
            for (int i = 0; i < d->count; i++) {
                Local<Object> r = Nan::New<Object>();
                // An op the server did not answer for (connection loss) has the request's code.
                int err = d->results[i].err == NESTJS_ZK_LOCK_NO_RESULT ? rc : d->results[i].err;
                Nan::Set(r, LOCAL_STRING("rc"), Nan::New<Int32>(err));
                if (rc == ZOK && d->paths[i] && d->results[i].err == ZOK && d->results[i].value) {
                    Nan::Set(r, LOCAL_STRING("path"), LOCAL_STRING(d->results[i].value));
                }
                Nan::Set(results, i, r);
            }
            argv[2] = results;
            CALLBACK_EPILOG();
        }
        free_multi(d);
    }

    static void AMulti(const Nan::FunctionCallbackInfo<Value>& info) {
        // Checked before the prolog makes the callback's handle (a throw after it would leak it).
        THROW_IF_NOT (info.Length() >= 2 && info[0]->IsArray() && Local<Array>::Cast(info[0])->Length() > 0,
                      "a_multi: expected a non-empty array of ops and a callback");
        A_METHOD_PROLOG(2);
        Local<Array> arr = Local<Array>::Cast(info[0]);
        int count = arr->Length();
        struct multi_completion_data *d = (struct multi_completion_data *) calloc(1, sizeof(struct multi_completion_data));
        d->cb = cb;
        d->count = count;
        d->results = (zoo_op_result_t *) calloc(count, sizeof(zoo_op_result_t));
        d->paths = (char **) calloc(count, sizeof(char *));
        for (int i = 0; i < count; i++) d->results[i].err = NESTJS_ZK_LOCK_NO_RESULT;
        zoo_op_t *ops = (zoo_op_t *) calloc(count, sizeof(zoo_op_t));
        // What the ops point to, kept until zoo_amulti has serialized them.
        char **strings = (char **) calloc(count * 2, sizeof(char *));
        struct ACL_vector **acls = (struct ACL_vector **) calloc(count, sizeof(struct ACL_vector *));
        int ret = ZOK;
        for (int i = 0; i < count && ret == ZOK; i++) {
            Local<Object> op = toLocalObj(Nan::Get(arr, i).ToLocalChecked());
            int type = toInt(Nan::Get(op, LOCAL_STRING("type")).ToLocalChecked());
            Nan::Utf8String path (toString(Nan::Get(op, LOCAL_STRING("path")).ToLocalChecked()));
            strings[i * 2] = strdup(*path);
            if (type == ZOO_CREATE_OP) {
                Local<Value> data = Nan::Get(op, LOCAL_STRING("data")).ToLocalChecked();
                int datalen = Buffer::HasInstance(data) ? BufferLength(toLocalObj(data)) : 0;
                strings[i * 2 + 1] = (char *) malloc(datalen + 1);
                if (datalen > 0) memcpy(strings[i * 2 + 1], BufferData(toLocalObj(data)), datalen);
                uint32_t flags = toUint(Nan::Get(op, LOCAL_STRING("flags")).ToLocalChecked());
                Local<Value> acl = Nan::Get(op, LOCAL_STRING("acl")).ToLocalChecked();
                if (acl->IsArray()) acls[i] = zk->createAclVector(Local<Array>::Cast(acl));
                int buflen = path.length() + 32;
                d->paths[i] = (char *) calloc(buflen, 1);
                zoo_create_op_init(&ops[i], strings[i * 2], strings[i * 2 + 1], datalen,
                                   acls[i] ? acls[i] : &ZOO_OPEN_ACL_UNSAFE, flags, d->paths[i], buflen);
            } else if (type == ZOO_DELETE_OP) {
                zoo_delete_op_init(&ops[i], strings[i * 2], toInt(Nan::Get(op, LOCAL_STRING("version")).ToLocalChecked()));
            } else {
                ret = ZBADARGUMENTS;
            }
        }
        if (ret == ZOK) ret = zk->zhandle ? zoo_amulti(zk->zhandle, count, ops, d->results, multi_completion, d) : ZINVALIDSTATE;
        for (int i = 0; i < count; i++) {
            free(strings[i * 2]);
            free(strings[i * 2 + 1]);
            if (acls[i]) {
                deallocate_ACL_vector(acls[i]);
                free(acls[i]);
            }
        }
        free(strings);
        free(acls);
        free(ops);
        // Not sent: no completion will come.
        if (ret != ZOK) {
            delete d->cb;
            free_multi(d);
        }
        zk->dropClosedSocket();
        RETURN_VALUE(info, Nan::New<Int32>(ret));
    }

    static void void_completion (int rc, const void *data) {`,
  },
  {
    before: `        Nan::SetPrototypeMethod(constructor_template,  "a_delete_",  ADelete);\n`,
    after: `        Nan::SetPrototypeMethod(constructor_template,  "a_delete_",  ADelete);\n        Nan::SetPrototypeMethod(constructor_template,  "a_multi",  AMulti);\n`,
  },
  {
    // A failed get_acl (NONODE, NOAUTH) comes with no vector: freeing it crashed the process.
    before: `        argv[3] = stat != NULL ? zkk->createStatObject(stat) : Nan::Null().As<Object>();\n\n        deallocate_ACL_vector(acl);\n`,
    after: `        argv[3] = stat != NULL ? zkk->createStatObject(stat) : Nan::Null().As<Object>();\n\n        if (acl != NULL) deallocate_ACL_vector(acl);\n`,
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
    'abort the process (see docs/zookeeper-client.md, What the patch changes).');
}

main();
