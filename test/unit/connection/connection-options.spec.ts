import { InvalidOptionError } from '../../../lib/core/errors.js';
import { resolveConnectionOptions, type ZkConnectionOptions } from '../../../lib/core/connection/connection-options.js';
import { validateAcquireOptions } from '../../../lib/core/queue/acquire-options.js';

function optionError(options: unknown): InvalidOptionError {
  try {
    resolveConnectionOptions(options as ZkConnectionOptions);
  } catch (error) {
    if (error instanceof InvalidOptionError) return error;
    throw error;
  }
  throw new Error('expected an InvalidOptionError');
}

describe('resolveConnectionOptions', () => {
  it('applies defaults and normalises hosts', () => {
    expect(resolveConnectionOptions({ connectString: 'zk1:2181, zk2:2181,[::1]:2182' })).toEqual({
      connectString: 'zk1:2181,zk2:2181,[::1]:2182',
      hosts: ['zk1:2181', 'zk2:2181', '[::1]:2182'],
      chroot: undefined,
      sessionTimeoutMs: 15000,
      connectTimeoutMs: 15000,
      auth: [],
      serverTickTimeMs: 2000,
      tls: undefined,
      client: 'typescript',
      maxReplyBytes: 16 * 1024 * 1024,
    });
  });

  it.each([
    [undefined, 'options'],
    [{ connectString: '' }, 'connectString'],
    [{ connectString: '   ' }, 'connectString'],
    [{ connectString: 42 }, 'connectString'],
    [{ connectString: 'zk1' }, 'connectString'],
    [{ connectString: 'zk1:0' }, 'connectString'],
    [{ connectString: 'zk1:70000' }, 'connectString'],
    [{ connectString: 'zk1:2181/chroot' }, 'connectString'],
    [{ connectString: 'zk1:2181', chroot: 'apps' }, 'chroot'],
    [{ connectString: 'zk1:2181', chroot: '/apps/' }, 'chroot'],
    [{ connectString: 'zk1:2181', chroot: '/a/../b' }, 'chroot'],
    [{ connectString: 'zk1:2181', sessionTimeoutMs: -1 }, 'sessionTimeoutMs'],
    [{ connectString: 'zk1:2181', sessionTimeoutMs: 0 }, 'sessionTimeoutMs'],
    [{ connectString: 'zk1:2181', sessionTimeoutMs: Number.NaN }, 'sessionTimeoutMs'],
    [{ connectString: 'zk1:2181', sessionTimeoutMs: 1.5 }, 'sessionTimeoutMs'],
    [{ connectString: 'zk1:2181', sessionTimeoutMs: '5000' }, 'sessionTimeoutMs'],
    [{ connectString: 'zk1:2181', connectTimeoutMs: Infinity }, 'connectTimeoutMs'],
    [{ connectString: 'zk1:2181', serverTickTimeMs: 0 }, 'serverTickTimeMs'],
    [{ connectString: 'zk1:2181', serverTickTimeMs: '2000' }, 'serverTickTimeMs'],
    [{ connectString: 'zk1:2181', auth: 'user:pass' }, 'auth'],
    [{ connectString: 'zk1:2181', auth: { credentials: '' } }, 'auth.credentials'],
    [{ connectString: 'zk1:2181', auth: { credentials: 'nocolon' } }, 'auth.credentials'],
    [{ connectString: 'zk1:2181', auth: [{ scheme: 'bad scheme', credentials: 'a:b' }] }, 'auth[0].scheme'],
    [{ connectString: 'zk1:2181', client: 'java' }, 'client'],
    [{ connectString: 'zk1:2181', tls: true }, 'tls'],
    [{ connectString: 'zk1:2181', tls: 'ca.pem' }, 'tls'],
    [{ connectString: 'zk1:2181', tls: { ca: 'x' }, client: 'addon' }, 'tls'],
    // what Node refuses at each connect (else taken for a failed host until connectTimeoutMs)
    [{ connectString: 'zk1:2181', tls: { ca: {} } }, 'tls.ca'],
    [{ connectString: 'zk1:2181', tls: { ca: '/etc/zookeeper/ca.pem' } }, 'tls.ca'],
    [{ connectString: 'zk1:2181', tls: { ciphers: 'NO-SUCH-CIPHER' } }, 'tls.ciphers'],
    [{ connectString: 'zk1:2181', tls: { key: 'client-key.pem' } }, 'tls.key'],
    [{ connectString: 'zk1:2181', tls: { checkServerIdentity: true } }, 'tls.checkServerIdentity'],
    [{ connectString: 'zk1:2181', tls: { minDHSize: -1 } }, 'tls.minDHSize'],
    [{ connectString: 'zk1:2181', maxReplyBytes: 0xffffe }, 'maxReplyBytes'],
    [{ connectString: 'zk1:2181', maxReplyBytes: 2 ** 30 + 1 }, 'maxReplyBytes'],
    [{ connectString: 'zk1:2181', maxReplyBytes: 2.5e6 + 0.5 }, 'maxReplyBytes'],
    [{ connectString: 'zk1:2181', maxReplyBytes: '16MiB' }, 'maxReplyBytes'],
    [{ connectString: 'zk1:2181', maxReplyBytes: 32 * 1024 * 1024, client: 'addon' }, 'maxReplyBytes'],
  ])('rejects %j naming %s', (options, option) => {
    const error = optionError(options);
    expect(error.option).toBe(option);
    expect(error.message).toContain(`"${option}"`);
  });

  it('takes maxReplyBytes from 0xfffff to 1 GiB', () => {
    expect(resolveConnectionOptions({ connectString: 'zk1:2181', maxReplyBytes: 0xfffff }).maxReplyBytes).toBe(0xfffff);
    expect(resolveConnectionOptions({ connectString: 'zk1:2181', maxReplyBytes: 2 ** 30 }).maxReplyBytes).toBe(2 ** 30);
  });

  it('refuses a URL scheme (zk://) saying to drop it, not blaming a chroot', () => {
    for (const connectString of ['zk://zk1:2181', 'zk://zk1:2181,zk2:2181', 'ZK://zk1:2181/app']) {
      const error = optionError({ connectString });
      expect(error.option).toBe('connectString');
      expect(error.message).toContain('drop the "');
      expect(error.message).toMatch(/drop the "zk:\/\/"/i);
      expect(error.message).not.toContain('chroot');
    }
  });

  it('never puts credentials in an error message', () => {
    const error = optionError({ connectString: 'zk1:2181', auth: { scheme: 'digest', credentials: 'secretpassword' } });
    expect(error.message).not.toContain('secretpassword');
  });
});

describe('validateAcquireOptions', () => {
  it.each([
    [{ waitMs: -1 }, 'waitMs'],
    [{ waitMs: Number.NaN }, 'waitMs'],
    [{ waitMs: 1e12 }, 'waitMs'],
    [{ waitMs: '100' }, 'waitMs'],
    [{ signal: {} }, 'signal'],
    [null, 'options'],
  ])('rejects %j naming %s', (options, option) => {
    expect(() => validateAcquireOptions(options)).toThrow(expect.objectContaining({ option }));
  });

  it('accepts 0 (try once), a timeout, and a signal', () => {
    expect(() => validateAcquireOptions({ waitMs: 0, signal: new AbortController().signal })).not.toThrow();
    expect(() => validateAcquireOptions({})).not.toThrow();
  });
});
