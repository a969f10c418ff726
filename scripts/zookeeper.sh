#!/usr/bin/env bash
# Throw-away Apache ZooKeeper servers on 127.0.0.1 for development and tests, run from
# Debian's `zookeeper` package (3.8). Only the processes this script started are ever signalled.
#
#   zookeeper.sh install            install zookeeper (and java, openssl) with apt-get when missing
#   zookeeper.sh start    [--dir D] [--port P] [--owner-pid PID] [--tls need|want|none]
#                         [--tls-name NAME] [--min-session-timeout MS] [--max-session-timeout MS]
#                                   one standalone server (id 1); with --tls, a TLS port too
#                                   (secureClientPort, next to the plain clientPort) with
#                                   certificates made for this run in D/tls (see TLS below)
#   zookeeper.sh ensemble [--dir D] [--owner-pid PID] [--peer-ports P1,...,P12]
#                         [--min-session-timeout MS] [--max-session-timeout MS]
#                                   three servers in a quorum (ids 1, 2, 3); with --peer-ports,
#                                   server I reaches server J (quorum, election port) at the next
#                                   two of these ports (I = 1..3, J = 1..3 without I, in order),
#                                   where the caller forwards to J's own ports (read from
#                                   D/server.J.cfg, its own server.J line): so that the caller can
#                                   silence the links between one server and the others
#   zookeeper.sh stop     [--dir D] [--id N] [--signal TERM|KILL]
#                                   stop server N (data kept) or all of them (D removed if the
#                                   script created it); TERM is followed by KILL after a grace time
#   zookeeper.sh restart  [--dir D] --id N [--min-session-timeout MS] [--max-session-timeout MS]
#                                   start server N again with its config and data; with a session
#                                   timeout option, that line of its config changed first (e.g. a
#                                   rolling change of maxSessionTimeout: a client that re-attaches
#                                   there negotiates the new bound)
#   zookeeper.sh status   [--dir D] id, port, pid, alive, mode of each server (exit 3 if one is
#                                   not serving)
#
# start/ensemble/restart print the connect string (127.0.0.1:PORT[,...]) as the last line of
# stdout and write it to D/connect; every other message goes to stderr. Without --dir, start and
# ensemble make a fresh directory (removed again by a full `stop`) and remember it, so that
# stop/status/restart without --dir act on the last one started from this checkout.
# D holds server.<id>.{cfg,pid,port}, data.<id>/, log.<id>/zookeeper.out, connect, kind.
# --min-session-timeout/--max-session-timeout: the servers' bounds on a client's session timeout
# (default 1000 and 60000 ms).
# --owner-pid PID: a detached watchdog runs `stop --dir D` once PID has exited (so a crashed or
# killed test runner leaves no server behind); a full `stop` ends the watchdog.
# TLS (--tls CLIENT_AUTH, start only): openssl makes a throw-away CA and, signed by it, a server
# certificate for NAME (--tls-name, default localhost: SAN DNS:localhost, IP:127.0.0.1; any other
# name: SAN DNS:NAME only) and a client certificate (CN=zk-test-client), P-256 keys, in D/tls:
# ca.pem, server.pem (key and certificate: the server's PEM key store), client.crt, client.key.
# The server takes them as PEM (ssl.keyStore.type=PEM, ssl.trustStore.type=PEM) on the Netty
# connection factory; ssl.clientAuth is CLIENT_AUTH (need: a client without a certificate signed
# by the CA is refused). The TLS connect string (localhost:SECURE_PORT) is written to
# D/secure-connect (the plain one stays the last line of stdout and D/connect); the port to
# D/server.1.secure-port. Netty's codec and resolver jars, which Debian's zookeeper.jar manifest
# does not list, are on the server's class path (without them the TLS handshake fails).
# Environment: ZK_START_TIMEOUT (s, default 60), ZK_STOP_GRACE (s, default 5), JAVA,
# SERVER_JVMFLAGS (extra JVM flags).
set -euo pipefail

ZK_SERVER_SH=/usr/share/zookeeper/bin/zkServer.sh
ZK_JAR=/usr/share/java/zookeeper.jar      # its manifest Class-Path lists netty, jute, slf4j-api...
SLF4J_BINDING=/usr/share/java/slf4j-simple.jar  # ...but no slf4j binding: without one, no server log
# ...nor netty-codec (SslHandler's base class) and netty-resolver, which the TLS port needs: without
# them it binds, then fails every handshake (NoClassDefFoundError in the log). Both come with
# libnetty-java, which libzookeeper-java depends on.
NETTY_EXTRA=(/usr/share/java/netty-codec.jar /usr/share/java/netty-resolver.jar)
OPENSSL=${OPENSSL:-openssl}
JAVA=${JAVA:-java}
START_TIMEOUT=${ZK_START_TIMEOUT:-60}
STOP_GRACE=${ZK_STOP_GRACE:-5}
REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SELF="$REPO_ROOT/scripts/$(basename "${BASH_SOURCE[0]}")"
LAST_DIR_FILE="${TMPDIR:-/tmp}/nestjs-zk-lock-zk.last.$(id -u).$(printf '%s' "$REPO_ROOT" | cksum | cut -d' ' -f1)"

log() { printf 'zookeeper.sh: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }
usage() { sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}" >&2; }

have_zookeeper() { [ -f "$ZK_SERVER_SH" ] && [ -f "$ZK_JAR" ]; }

cmd_install() {
  local -a pkgs=()
  command -v "$JAVA" >/dev/null 2>&1 || pkgs+=(default-jre-headless)
  have_zookeeper || pkgs+=(zookeeper)
  command -v "$OPENSSL" >/dev/null 2>&1 || pkgs+=(openssl)  # the certificates of start --tls
  if [ "${#pkgs[@]}" -eq 0 ]; then
    log "ZooKeeper already installed ($ZK_JAR)"
    return 0
  fi
  if [ "$(id -u)" -ne 0 ]; then
    log "ZooKeeper, Java and/or openssl are missing ($ZK_SERVER_SH, $ZK_JAR, java, openssl). Install them as root:"
    log "  sudo apt-get update && sudo apt-get install -y --no-install-recommends ${pkgs[*]}"
    exit 1
  fi
  command -v apt-get >/dev/null 2>&1 || die "apt-get not found: install ZooKeeper 3.8 (Debian layout) and Java by hand"
  log "installing ${pkgs[*]} with apt-get"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2
  apt-get install -y -qq --no-install-recommends "${pkgs[@]}" >&2
  have_zookeeper || die "apt-get finished but $ZK_SERVER_SH or $ZK_JAR is still missing"
  command -v "$JAVA" >/dev/null 2>&1 || die "java is still missing after installing ${pkgs[*]}"
  command -v "$OPENSSL" >/dev/null 2>&1 || die "openssl is still missing after installing ${pkgs[*]}"
}

# N distinct free TCP ports on 127.0.0.1, one per line; below the ephemeral range when it allows.
free_ports() {
  local n=$1 lo
  lo=$(cut -f1 /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32768)
  if command -v node >/dev/null 2>&1; then
    node -e '
      const net = require("net"); const [n, lo] = process.argv.slice(1).map(Number);
      const found = new Set(), held = [];
      const tryPort = (p) => new Promise((ok) => { const s = net.createServer();
        s.once("error", () => ok(0)); s.listen(p, "127.0.0.1", () => { held.push(s); ok(s.address().port); }); });
      (async () => {
        for (let i = 0; found.size < n && i < 1000; i++) {
          const p = await tryPort(lo > 21000 && i < 900 ? 20000 + Math.floor(Math.random() * (lo - 20000)) : 0);
          if (p) found.add(p);
        }
        held.forEach((s) => s.close());
        if (found.size < n) process.exit(1);
        console.log([...found].join("\n"));
      })();' "$n" "$lo"
    return
  fi
  local -a ports=() ; local p i
  for ((i = 0; ${#ports[@]} < n && i < 1000; i++)); do
    p=$((20000 + RANDOM % 12000))
    [[ " ${ports[*]} " == *" $p "* ]] && continue
    (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null && continue   # something listens there
    ports+=("$p")
  done
  [ "${#ports[@]}" -eq "$n" ] || return 1
  printf '%s\n' "${ports[@]}"
}

# four-letter word: prints the server's answer (empty when it does not answer within 3 s)
four() {
  if command -v nc >/dev/null 2>&1; then
    printf '%s' "$2" | timeout 3 nc 127.0.0.1 "$1" 2>/dev/null || true
  else
    # shellcheck disable=SC2016
    timeout 3 bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$1" || exit 1; printf "%s" "$2" >&3; cat <&3' \
      four "$1" "$2" 2>/dev/null || true
  fi
}
port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
server_mode() {  # leader|follower|standalone|not-serving|down
  local out; out=$(four "$1" srvr)
  if [[ $out =~ Mode:\ ([a-z]+) ]]; then echo "${BASH_REMATCH[1]}"
  elif [ -n "$out" ]; then echo not-serving
  else echo down; fi
}

# --- state in $DIR -------------------------------------------------------------------------------
DIR='' ID='' PORT='' SIGNAL=TERM OWNER_PID='' PEER_PORTS='' TLS='' TLS_NAME=localhost
MIN_SESSION_TIMEOUT='' MAX_SESSION_TIMEOUT=''

use_dir() {  # resolve --dir (or the last auto-created one) for stop/status/restart
  if [ -z "$DIR" ]; then
    [ -f "$LAST_DIR_FILE" ] || die "no --dir given and no server started without --dir from $REPO_ROOT"
    DIR=$(cat "$LAST_DIR_FILE")
  fi
  [ -d "$DIR" ] || return 1
  DIR=$(cd "$DIR" && pwd)
}
new_dir() {  # for start/ensemble
  if [ -z "$DIR" ]; then
    DIR=$(mktemp -d "${TMPDIR:-/tmp}/nestjs-zk-lock-zk.XXXXXX")
    : >"$DIR/.created-by-script"
    printf '%s\n' "$DIR" >"$LAST_DIR_FILE"
  elif [ ! -d "$DIR" ]; then
    mkdir -p "$DIR"
    : >"$DIR/.created-by-script"
  fi
  DIR=$(cd "$DIR" && pwd)
  local id
  for id in $(server_ids); do
    is_ours "$id" && die "server $id in $DIR is already running (pid $(cat "$DIR/server.$id.pid")); stop it first"
  done
  return 0
}
server_ids() { local f; for f in "$DIR"/server.*.cfg; do [ -f "$f" ] || continue; f=${f##*/server.}; echo "${f%.cfg}"; done; }
port_of() { cat "$DIR/server.$1.port"; }
pid_of() { cat "$DIR/server.$1.pid" 2>/dev/null || true; }

proc_state() { sed 's/^.*) //' "/proc/$1/stat" 2>/dev/null | cut -c1 || true; }  # R S T Z...
# true when server $1's recorded pid is a live (non-zombie) java running our config file
is_ours() {
  local pid state cmdline
  pid=$(pid_of "$1")
  [[ $pid =~ ^[0-9]+$ ]] || return 1
  state=$(proc_state "$pid")
  [ -n "$state" ] && [ "$state" != Z ] && [ "$state" != X ] || return 1
  cmdline=$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null) || return 1
  [[ $cmdline == *" $DIR/server.$1.cfg"* ]]
}

# tickTime: TICK_TIME_MS in scripts/support/zookeeper.mjs says the same to the clients (serverTickTimeMs)
write_cfg() {  # id client-port [server.N lines]
  local id=$1 port=$2
  mkdir -p "$DIR/data.$id" "$DIR/log.$id"
  cat >"$DIR/server.$id.cfg" <<EOF
# written by scripts/zookeeper.sh: a throw-away test server
tickTime=250
initLimit=40
syncLimit=20
minSessionTimeout=${MIN_SESSION_TIMEOUT:-1000}
maxSessionTimeout=${MAX_SESSION_TIMEOUT:-60000}
dataDir=$DIR/data.$id
clientPort=$port
clientPortAddress=127.0.0.1
# many test clients share 127.0.0.1 (the default limit is 60 per address)
maxClientCnxns=0
admin.enableServer=false
4lw.commands.whitelist=*
# no fsync: a killed process loses nothing, only a host crash would
forceSync=no
preAllocSize=4096
${3:-}
EOF
  printf '%s\n' "$port" >"$DIR/server.$id.port"
}

set_cfg() {  # id key value: that line of server id's config (nothing when value is empty)
  [ -n "$3" ] || return 0
  sed -i "s/^$2=.*/$2=$3/" "$DIR/server.$1.cfg"
  log "server $1: $2=$3"
}

launch() {  # id: start the java process detached from us, record its pid
  local id=$1 cfg="$DIR/server.$1.cfg" logdir="$DIR/log.$1" i cp="$ZK_JAR"
  have_zookeeper || die "ZooKeeper is not installed: run 'bash scripts/zookeeper.sh install'"
  command -v "$JAVA" >/dev/null 2>&1 || die "java not found: run 'bash scripts/zookeeper.sh install'"
  [ -f "$SLF4J_BINDING" ] && cp="$cp:$SLF4J_BINDING"
  for i in "${NETTY_EXTRA[@]}"; do [ -f "$i" ] && cp="$cp:$i"; done
  local -a extra=()
  read -r -a extra <<<"${SERVER_JVMFLAGS:-}"
  mkdir -p "$logdir"
  rm -f "$DIR/server.$id.pid"
  printf '\n==== %s starting server %s\n' "$(date '+%F %T')" "$id" >>"$logdir/zookeeper.out"
  # setsid: own session, no terminal; all fds redirected/closed so that nothing of the caller
  # (a jest or CI pipe) stays open. The inner shell records its pid, then execs java in place.
  # shellcheck disable=SC2016
  setsid bash -c 'echo $$ >"$1"; shift
    for fd in /proc/$$/fd/*; do fd=${fd##*/}
      if [ "$fd" -gt 2 ] && [ -L "/proc/$$/fd/$fd" ]; then eval "exec $fd>&-"; fi; done
    exec "$@"' zk-server "$DIR/server.$id.pid" \
    "$JAVA" -Xmx256m -XX:+UseSerialGC \
    "-Dzookeeper.log.dir=$logdir" -Dzookeeper.log.file=zookeeper.log \
    -Dznode.container.checkIntervalMs=1000 -Dznode.container.maxPerMinute=600000 \
    -Dorg.slf4j.simpleLogger.showDateTime=true \
    '-Dorg.slf4j.simpleLogger.dateTimeFormat=yyyy-MM-dd HH:mm:ss.SSS' \
    ${extra[@]+"${extra[@]}"} \
    -cp "$cp" org.apache.zookeeper.server.quorum.QuorumPeerMain "$cfg" \
    </dev/null >>"$logdir/zookeeper.out" 2>&1 &
  disown "$!"  # no "Killed" job notices when a failed start is cleaned up
  for ((i = 0; i < 50; i++)); do [ -s "$DIR/server.$id.pid" ] && break; sleep 0.1; done
  [ -s "$DIR/server.$id.pid" ] || die "server $id did not record its pid"
  log "server $id: pid $(pid_of "$id"), client port $(port_of "$id"), log $logdir/zookeeper.out"
}

bind_failed() {  # did server $1 fail to bind a port? (only this launch's part of its log)
  tac "$DIR/log.$1/zookeeper.out" | sed '/^==== .* starting server/q' | grep -q BindException
}
log_tail() { log "---- last lines of $DIR/log.$1/zookeeper.out ----"; tail -n 30 "$DIR/log.$1/zookeeper.out" >&2 || true; }

# wait until every given server answers imok and serves (srvr: standalone, or in an ensemble
# leader/follower with exactly one leader). Returns 2 if a server died of a port clash, 1 on any other failure.
wait_up() {
  local kind deadline=$((SECONDS + START_TIMEOUT)) id ok leaders mode t0=$SECONDS
  kind=$(cat "$DIR/kind")
  while :; do
    ok=1 leaders=0
    for id in "$@"; do
      if ! is_ours "$id"; then
        log "server $id exited during start-up"; log_tail "$id"
        bind_failed "$id" && return 2
        return 1
      fi
      # a taken election port does not stop a server at once: it exits ~3 s later (code 14)
      if bind_failed "$id"; then
        log "server $id could not bind one of its ports"; log_tail "$id"
        return 2
      fi
      [ "$(four "$(port_of "$id")" ruok)" = imok ] || { ok=0; continue; }
      # the TLS port (when there is one) must accept connections too
      if [ -f "$DIR/server.$id.secure-port" ] && ! port_open "$(cat "$DIR/server.$id.secure-port")"; then ok=0; continue; fi
      # imok comes as soon as the port is open; srvr tells whether it serves requests yet
      mode=$(server_mode "$(port_of "$id")")
      case $kind:$mode in
        ensemble:leader) leaders=$((leaders + 1)) ;;
        ensemble:follower | standalone:standalone) ;;
        *) ok=0 ;;
      esac
    done
    if [ "$ok" = 1 ] && { [ "$kind" != ensemble ] || [ "$#" -lt 3 ] || [ "$leaders" = 1 ]; }; then
      log "server(s) $* up after $((SECONDS - t0)) s"
      return 0
    fi
    if [ "$SECONDS" -ge "$deadline" ]; then
      log "server(s) $* not ready after ${START_TIMEOUT} s"
      for id in "$@"; do log "server $id: mode $(server_mode "$(port_of "$id")")"; log_tail "$id"; done
      return 1
    fi
    sleep 0.2
  done
}

stop_ids() {  # signal ids...: TERM (then KILL after the grace period) or KILL
  local sig=$1 id pid deadline; shift
  local -a live=() pids=()
  for id in "$@"; do
    if is_ours "$id"; then
      pid=$(pid_of "$id")
      kill -s "$sig" "$pid" 2>/dev/null || true
      kill -s CONT "$pid" 2>/dev/null || true   # a paused (SIGSTOPped) server too
      live+=("$id") pids+=("$pid")
    else
      rm -f "$DIR/server.$id.pid"
    fi
  done
  [ "${#live[@]}" -gt 0 ] || return 0
  log "stopping server(s) ${live[*]} in $DIR (SIG$sig)"
  # Wait on the signalled pids themselves until they are gone or zombies, not on is_ours: a killed
  # JVM's /proc/PID/cmdline reads empty while its threads are still being torn down, so is_ours
  # says "gone" too early (a loaded CI run found the server alive right after stop returned).
  deadline=$((SECONDS + STOP_GRACE))
  while :; do
    local -a still=()
    for pid in "${pids[@]}"; do
      case $(proc_state "$pid") in '' | Z | X) ;; *) still+=("$pid") ;; esac
    done
    [ "${#still[@]}" -eq 0 ] && break
    if [ "$SECONDS" -ge "$deadline" ]; then
      [ "$sig" = KILL ] && die "server process(es) ${still[*]} survived SIGKILL"
      log "server process(es) ${still[*]} still running after ${STOP_GRACE} s: SIGKILL"
      for pid in "${still[@]}"; do kill -s KILL "$pid" 2>/dev/null || true; done
      sig=KILL deadline=$((SECONDS + 5))
    fi
    sleep 0.05
  done
  for id in "${live[@]}"; do rm -f "$DIR/server.$id.pid"; done
}

# launch servers $@ (configs written) and wait for them; on failure kill them again
finish_start() {
  local rc=0 id
  for id in "$@"; do launch "$id"; done
  wait_up "$@" || rc=$?
  if [ "$rc" -ne 0 ]; then stop_ids KILL "$@"; return "$rc"; fi
  start_watchdog
  cat "$DIR/connect"
}

start_watchdog() {  # with --owner-pid: stop everything in $DIR once that process is gone
  [ -n "$OWNER_PID" ] || return 0
  stop_watchdog
  # shellcheck disable=SC2016
  setsid bash -c 'echo $$ >"$3/watchdog.pid"
    while kill -0 "$1" 2>/dev/null && [ -f "$3/watchdog.pid" ]; do sleep 1; done
    [ -f "$3/watchdog.pid" ] || exit 0
    rm -f "$3/watchdog.pid"; echo "owner pid $1 is gone: stopping"; exec bash "$2" stop --dir "$3"' \
    zk-watchdog "$OWNER_PID" "$SELF" "$DIR" </dev/null >>"$DIR/watchdog.log" 2>&1 &
  disown "$!"
  local i; for ((i = 0; i < 50; i++)); do [ -s "$DIR/watchdog.pid" ] && break; sleep 0.1; done
  log "watchdog (pid $(cat "$DIR/watchdog.pid" 2>/dev/null)): stops the server(s) when pid $OWNER_PID exits"
}
stop_watchdog() {  # the watchdog is a session (and process group) leader: end it and its sleep
  local pid
  pid=$(cat "$DIR/watchdog.pid" 2>/dev/null) || return 0
  rm -f "$DIR/watchdog.pid"
  if [[ $pid =~ ^[0-9]+$ ]] && tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF "zk-watchdog "; then
    kill -- "-$pid" 2>/dev/null || true
  fi
}

# TLS material for --tls in $DIR/tls (see the header): a CA, a server and a client certificate
make_tls() {
  command -v "$OPENSSL" >/dev/null 2>&1 || die "--tls needs openssl ($OPENSSL not found)"
  local t="$DIR/tls" san who
  rm -rf "$t"; mkdir -p "$t"
  if [ "$TLS_NAME" = localhost ]; then san='DNS:localhost,IP:127.0.0.1'; else san="DNS:$TLS_NAME"; fi
  ossl() { "$OPENSSL" "$@" >>"$t/openssl.log" 2>&1 || die "openssl $1 failed (see $t/openssl.log)"; }
  ossl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout "$t/ca.key" -out "$t/ca.pem" \
    -days 2 -subj "/CN=nestjs-zk-lock throw-away test CA $(basename "$DIR")" \
    -addext 'basicConstraints=critical,CA:TRUE' -addext 'keyUsage=critical,keyCertSign,cRLSign'
  for who in server client; do
    ossl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout "$t/$who.key" -out "$t/$who.csr" \
      -subj "/CN=$([ "$who" = server ] && echo "$TLS_NAME" || echo zk-test-client)"
    if [ "$who" = server ]; then
      printf 'subjectAltName=%s\nextendedKeyUsage=serverAuth\nkeyUsage=critical,digitalSignature\n' "$san" >"$t/$who.ext"
    else
      printf 'extendedKeyUsage=clientAuth\nkeyUsage=critical,digitalSignature\n' >"$t/$who.ext"
    fi
    ossl x509 -req -in "$t/$who.csr" -CA "$t/ca.pem" -CAkey "$t/ca.key" -CAcreateserial -days 2 \
      -extfile "$t/$who.ext" -out "$t/$who.crt"
  done
  # the server's key store: its (PKCS#8) key and certificate in one PEM file
  cat "$t/server.key" "$t/server.crt" >"$t/server.pem"
  chmod 600 "$t"/*.key "$t/server.pem"
}
tls_cfg() {  # secure-port: the TLS port's lines of the config
  cat <<EOF
# TLS (--tls $TLS): Netty serves both ports; the key store and trust store are PEM files
serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory
secureClientPort=$1
secureClientPortAddress=127.0.0.1
ssl.keyStore.location=$DIR/tls/server.pem
ssl.keyStore.type=PEM
ssl.trustStore.location=$DIR/tls/ca.pem
ssl.trustStore.type=PEM
ssl.clientAuth=$TLS
EOF
}

cmd_start() {
  local attempt rc port secure
  local -a ports
  new_dir
  echo standalone >"$DIR/kind"
  rm -f "$DIR/server.1.secure-port" "$DIR/secure-connect"
  [ -z "$TLS" ] || make_tls
  for attempt in 1 2 3; do
    [ "$attempt" -gt 1 ] && log "port clash; retrying with other ports (attempt $attempt)"
    mapfile -t ports < <(free_ports 2)
    [ "${#ports[@]}" -eq 2 ] || die "no free port found"
    port=${PORT:-${ports[0]}}
    if [ -n "$TLS" ]; then
      secure=${ports[1]}
      [ "$secure" != "$port" ] || secure=${ports[0]}
      write_cfg 1 "$port" "$(tls_cfg "$secure")"
      printf '%s\n' "$secure" >"$DIR/server.1.secure-port"
      echo "localhost:$secure" >"$DIR/secure-connect"
    else
      write_cfg 1 "$port"
    fi
    echo "127.0.0.1:$port" >"$DIR/connect"
    rc=0; finish_start 1 || rc=$?
    [ "$rc" -eq 0 ] && return 0
    if [ "$rc" -ne 2 ] || [ -n "$PORT" ]; then break; fi
  done
  die "ZooKeeper did not come up (files kept in $DIR)"
}

cmd_ensemble() {
  local attempt rc id servers connect
  local -a p
  new_dir
  echo ensemble >"$DIR/kind"
  for attempt in 1 2 3; do
    [ "$attempt" -gt 1 ] && log "port clash; retrying with other ports (attempt $attempt)"
    mapfile -t p < <(free_ports 9)
    [ "${#p[@]}" -eq 9 ] || die "no free ports found"
    servers='' connect=''
    for id in 1 2 3; do
      servers+="server.$id=127.0.0.1:${p[id + 2]}:${p[id + 5]}"$'\n'
      connect+="${connect:+,}127.0.0.1:${p[id - 1]}"
    done
    for id in 1 2 3; do
      [ -z "$PEER_PORTS" ] || servers=$(peer_lines "$id" "${p[@]}")$'\n'
      write_cfg "$id" "${p[id - 1]}" "$servers"
      echo "$id" >"$DIR/data.$id/myid"
    done
    echo "$connect" >"$DIR/connect"
    rc=0; finish_start 1 2 3 || rc=$?
    [ "$rc" -eq 0 ] && return 0
    [ "$rc" -eq 2 ] || break
  done
  die "ZooKeeper ensemble did not come up (files kept in $DIR)"
}

# server.N lines of server $1's config with --peer-ports (then the 9 free ports of cmd_ensemble):
# its own line with its own ports, every other server at the caller's forwarding ports
peer_lines() {
  local self=$1 j k=0; shift
  local -a p=("$@") pp
  IFS=, read -r -a pp <<<"$PEER_PORTS"
  k=$(((self - 1) * 4))
  for j in 1 2 3; do
    if [ "$j" = "$self" ]; then
      echo "server.$j=127.0.0.1:${p[j + 2]}:${p[j + 5]}"
    else
      echo "server.$j=127.0.0.1:${pp[k]}:${pp[k + 1]}"
      k=$((k + 2))
    fi
  done
}

cmd_stop() {
  if [ -z "$DIR" ] && [ ! -f "$LAST_DIR_FILE" ]; then log "nothing to stop"; return 0; fi
  if ! use_dir; then log "nothing to stop: $DIR does not exist"; return 0; fi
  if [ -n "$ID" ]; then
    [ -f "$DIR/server.$ID.cfg" ] || die "no server $ID in $DIR"
    stop_ids "$SIGNAL" "$ID"
    return 0
  fi
  stop_watchdog
  # shellcheck disable=SC2046
  stop_ids "$SIGNAL" $(server_ids)
  if [ -f "$DIR/.created-by-script" ]; then
    rm -rf "$DIR"
    if [ -f "$LAST_DIR_FILE" ] && [ "$(cat "$LAST_DIR_FILE")" = "$DIR" ]; then rm -f "$LAST_DIR_FILE"; fi
    log "removed $DIR"
  fi
}

cmd_restart() {
  use_dir || die "no such directory: $DIR"
  [ -n "$ID" ] || die "restart needs --id N"
  [ -f "$DIR/server.$ID.cfg" ] || die "no server $ID in $DIR"
  if is_ours "$ID"; then
    [ -z "$MIN_SESSION_TIMEOUT$MAX_SESSION_TIMEOUT" ] || die "server $ID is running: stop it before changing its session timeouts"
    log "server $ID is already running (pid $(pid_of "$ID"))"
  else
    set_cfg "$ID" minSessionTimeout "$MIN_SESSION_TIMEOUT"
    set_cfg "$ID" maxSessionTimeout "$MAX_SESSION_TIMEOUT"
    launch "$ID"
  fi
  wait_up "$ID" || die "server $ID did not come back (log: $DIR/log.$ID/zookeeper.out)"
  cat "$DIR/connect"
}

cmd_status() {
  use_dir || die "no such directory: $DIR"
  local id pid alive mode rc=0
  printf '# dir %s, kind %s, connect %s\n' "$DIR" "$(cat "$DIR/kind" 2>/dev/null)" "$(cat "$DIR/connect" 2>/dev/null)"
  printf '%s\t%s\t%s\t%s\t%s\n' id port pid alive mode
  for id in $(server_ids); do
    pid=$(pid_of "$id") alive=no mode=down
    if is_ours "$id"; then
      alive=yes
      [ "$(proc_state "$pid")" = T ] && alive=paused
      mode=$(server_mode "$(port_of "$id")")
    fi
    case $mode in leader | follower | standalone) ;; *) rc=3 ;; esac
    printf '%s\t%s\t%s\t%s\t%s\n' "$id" "$(port_of "$id")" "${pid:--}" "$alive" "$mode"
  done
  return "$rc"
}

main() {
  local cmd=${1:-help}
  [ "$#" -gt 0 ] && shift
  while [ "$#" -gt 0 ]; do
    case $1 in
      --dir) DIR=${2:?--dir needs a value}; shift 2 ;;
      --port) PORT=${2:?--port needs a value}; shift 2 ;;
      --id) ID=${2:?--id needs a value}; shift 2 ;;
      --owner-pid) OWNER_PID=${2:?--owner-pid needs a value}; shift 2 ;;
      --peer-ports) PEER_PORTS=${2:?--peer-ports needs a value}; shift 2 ;;
      --tls) TLS=${2:?--tls needs need, want or none}; shift 2 ;;
      --tls-name) TLS_NAME=${2:?--tls-name needs a value}; shift 2 ;;
      --min-session-timeout) MIN_SESSION_TIMEOUT=${2:?--min-session-timeout needs a value}; shift 2 ;;
      --max-session-timeout) MAX_SESSION_TIMEOUT=${2:?--max-session-timeout needs a value}; shift 2 ;;
      --signal) SIGNAL=${2:?--signal needs a value}; SIGNAL=${SIGNAL#SIG}; shift 2 ;;
      *) usage; die "unknown option: $1" ;;
    esac
  done
  [ -z "$PORT" ] || [[ $PORT =~ ^[0-9]+$ ]] || die "--port must be a number"
  [ -z "$ID" ] || [[ $ID =~ ^[0-9]+$ ]] || die "--id must be a number"
  [ -z "$OWNER_PID" ] || kill -0 "$OWNER_PID" 2>/dev/null || die "--owner-pid $OWNER_PID is not a running process"
  [ -z "$MIN_SESSION_TIMEOUT" ] || [[ $MIN_SESSION_TIMEOUT =~ ^[0-9]+$ ]] || die "--min-session-timeout must be a number (ms)"
  [ -z "$MAX_SESSION_TIMEOUT" ] || [[ $MAX_SESSION_TIMEOUT =~ ^[0-9]+$ ]] || die "--max-session-timeout must be a number (ms)"
  case $cmd in start | ensemble | restart) ;; *) [ -z "$MIN_SESSION_TIMEOUT$MAX_SESSION_TIMEOUT" ] || die "--min/--max-session-timeout are for start, ensemble and restart" ;; esac
  case $SIGNAL in TERM | KILL) ;; *) die "--signal must be TERM or KILL" ;; esac
  case $TLS in '' | need | want | none) ;; *) die "--tls must be need, want or none" ;; esac
  [[ $TLS_NAME =~ ^[A-Za-z0-9.-]+$ ]] || die "--tls-name must be a DNS name"
  [ -z "$TLS" ] || [ "$cmd" = start ] || die "--tls is for start only"
  [ -z "$PEER_PORTS" ] || [[ $PEER_PORTS =~ ^[0-9]+(,[0-9]+){11}$ ]] || die "--peer-ports must be 12 comma-separated ports"
  case $cmd in
    install) cmd_install ;;
    start) cmd_start ;;
    ensemble) cmd_ensemble ;;
    stop) cmd_stop ;;
    restart) cmd_restart ;;
    status) cmd_status ;;
    help | -h | --help) usage ;;
    *) usage; die "unknown command: $cmd" ;;
  esac
}

main "$@"
