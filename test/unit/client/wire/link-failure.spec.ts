import { classifyLinkError, isCertificateFailure, isTlsFailure, type LinkStage } from '../../../../lib/core/client/wire/link-failure.js';
import type { LinkFailureKind } from '../../../../lib/core/client/session.js';

/** During the TLS handshake, no certificate refused by Node, none offered by us. */
const handshake: LinkStage = { tls: true, secured: false, certificateRefused: false, clientCertificate: false };

// What the real server produces is checked in test/integration/client/tls.spec.ts; these are the others.
describe('classifyLinkError', () => {
  it.each<[code: string, message: string, reason: string | undefined, stage: Partial<LinkStage>, kind: LinkFailureKind, says: RegExp]>([
    ['CERT_HAS_EXPIRED', 'certificate has expired', undefined, { certificateRefused: true }, 'tls-certificate', /certificate was refused \(certificate has expired, CERT_HAS_EXPIRED\)$/],
    ['ERR_SSL_TLSV13_ALERT_CERTIFICATE_REQUIRED', 'x', 'tlsv13 alert certificate required', {}, 'tls-client-certificate', /requires a client certificate.*tls.cert and tls.key/],
    ['ERR_SSL_TLSV1_ALERT_UNKNOWN_CA', 'x', 'tlsv1 alert unknown ca', { clientCertificate: true }, 'tls-client-certificate', /refused our client certificate/],
    ['ERR_SSL_TLSV1_ALERT_PROTOCOL_VERSION', 'x', 'tlsv1 alert protocol version', {}, 'tls-protocol', /no TLS version or cipher that both sides accept/],
    ['ERR_SSL_SSLV3_ALERT_ILLEGAL_PARAMETER', 'x', 'sslv3 alert illegal parameter', {}, 'tls-protocol', /the server refused it/],
    ['ERR_SSL_WRONG_VERSION_NUMBER', 'x', 'wrong version number', {}, 'not-tls', /^does not speak TLS \(wrong version number.*is it the clientPort rather than the secureClientPort\?$/],
    ['ECONNRESET', 'Client network socket disconnected before secure TLS connection was established', undefined, {}, 'tls-no-answer', /without a TLS answer/],
    ['ECONNRESET', 'read ECONNRESET', undefined, { secured: true }, 'other', /^read ECONNRESET$/],
    ['ECONNRESET', 'read ECONNRESET', undefined, { tls: false }, 'other', /^read ECONNRESET$/],
  ])('%s (%s, %s, stage %j) → %s', (code, message, reason, stage, kind, says) => {
    const failure = classifyLinkError(Object.assign(new Error(message), { code, reason }), { ...handshake, ...stage });
    expect(failure.kind).toBe(kind);
    expect(failure.message).toMatch(says);
  });

  it('stops the first connect only for certificates: the server’s, its name, ours', () => {
    const certificates: LinkFailureKind[] = ['tls-certificate', 'tls-host-name', 'tls-client-certificate'];
    const others: LinkFailureKind[] = ['tls-protocol', 'tls-no-answer', 'not-tls', 'unanswered', 'other'];
    expect(certificates.every(isCertificateFailure)).toBe(true);
    expect(others.some(isCertificateFailure)).toBe(false);
  });

  it('counts a link closed during the handshake as no TLS failure (a server that is not serving closes it too)', () => {
    expect(isTlsFailure('tls-no-answer')).toBe(false);
    expect(isTlsFailure('unanswered')).toBe(false);
    expect(isTlsFailure('not-tls')).toBe(true);
    expect(isTlsFailure('tls-protocol')).toBe(true);
  });
});
