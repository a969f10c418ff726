// Placeholder until the ticket-sale sample lands: boots a Nest application context with
// ZkLockModule (imported by package name, as a user would), prints the connection and the
// server's state, takes a lock and shows its node, then shuts down cleanly.
import 'reflect-metadata';
import net from 'node:net';
import { Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { LockService, ZkConnection, ZkLockModule, parseHolderData } from 'nestjs-zk-lock';

const connectString = process.env.ZK_CONNECT ?? '127.0.0.1:2181';

class AppModule {}
Module({ imports: [ZkLockModule.forRoot({ connectString, app: 'sample-app', instance: `demo-${process.pid}` })] })(AppModule);

function fourLetter(hostPort, command) {
  const [host, port] = hostPort.split(':');
  return new Promise((resolve, reject) => {
    let out = '';
    const socket = net.connect(Number(port), host, () => socket.end(command));
    socket.on('data', (d) => (out += d)).on('end', () => resolve(out)).on('error', reject);
  });
}

const app = await NestFactory.createApplicationContext(AppModule);
app.enableShutdownHooks();
const connection = app.get(ZkConnection);
const locks = app.get(LockService);
console.log(`\nconnection: ${connection.state}, session 0x${connection.sessionId}, timeout ${connection.sessionTimeoutMs} ms`);
for (const host of connection.options.hosts) {
  const srvr = await fourLetter(host, 'srvr').catch((e) => `unreachable: ${e.message}`);
  console.log(`server ${host}: ${srvr.split('\n').filter((l) => /Mode|version|Node count/.test(l)).join('; ')}`);
}
await locks.withLock('demo', async (lease) => {
  const { data } = await connection.session.getData(lease.path);
  console.log(`holding ${lease.path}\n  fencing token ${lease.fencingToken}\n  holder ${JSON.stringify(parseHolderData(data))}`);
});
await app.close();
console.log('released the lock and closed the session\n');
