// The `tls` option checked at construction: what Node would refuse at each connect (taken for a
// host that failed, and retried until connectTimeoutMs) is an InvalidOptionError at once, naming
// the field where one is to blame.
import { createSecureContext, type SecureContextOptions } from 'node:tls';
import { InvalidOptionError } from '../errors.js';
import { describe } from '../validation.js';
import type { ZkTlsOptions } from './connection-options.js';

const PEM_CERTIFICATE = /-----BEGIN (TRUSTED )?CERTIFICATE-----/;

export function validateTlsOptions(tls: ZkTlsOptions): void {
  // Node ignores a `ca` without a PEM certificate (a file's path, say): then no server verifies.
  const cas = tls.ca === undefined ? [] : Array.isArray(tls.ca) ? tls.ca : [tls.ca];
  cas.forEach((ca, i) => {
    const field = Array.isArray(tls.ca) ? `tls.ca[${i}]` : 'tls.ca';
    if (typeof ca !== 'string' && !Buffer.isBuffer(ca)) return; // createSecureContext names the type
    if (!PEM_CERTIFICATE.test(ca.toString('latin1'))) {
      throw new InvalidOptionError(field, 'holds no PEM certificate ("-----BEGIN CERTIFICATE-----"): a file path instead of the file\'s content?');
    }
  });
  if (tls.servername !== undefined && typeof tls.servername !== 'string') throw new InvalidOptionError('tls.servername', `expected a host name, got ${describe(tls.servername)}`);
  if (tls.checkServerIdentity !== undefined && typeof tls.checkServerIdentity !== 'function') {
    throw new InvalidOptionError('tls.checkServerIdentity', `expected a function, got ${describe(tls.checkServerIdentity)}`);
  }
  if (tls.minDHSize !== undefined && !(typeof tls.minDHSize === 'number' && tls.minDHSize > 0)) {
    throw new InvalidOptionError('tls.minDHSize', `expected a positive number, got ${describe(tls.minDHSize)}`);
  }
  if (tls.secureContext !== undefined) return; // Node builds none from the rest then
  const problem = secureContextProblem(tls);
  if (problem === undefined) return;
  // Which field: the first that Node refuses on its own (none for a key that does not match its cert).
  const blamed = Object.keys(tls).find((key) => key !== 'passphrase' && secureContextProblem({ [key]: tls[key as keyof ZkTlsOptions], passphrase: tls.passphrase }) !== undefined);
  throw new InvalidOptionError(blamed ? `tls.${blamed}` : 'tls', `Node refuses it: ${problem}`);
}

/** Node's complaint about a secure context made of `options`, if any. */
function secureContextProblem(options: SecureContextOptions): string | undefined {
  try {
    createSecureContext(options);
    return undefined;
  } catch (error) {
    const { message, code } = error as NodeJS.ErrnoException;
    return code && !message.includes(code) ? `${message} (${code})` : message;
  }
}
