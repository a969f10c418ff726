// Why a link attempt failed, told from what the socket said: a TLS refusal by what was refused (the
// server's certificate, its name, our client certificate, the protocol), or a port that does not
// speak what we spoke. The messages say what to change.
import type { LinkFailureKind } from '../session.js';

/** A socket error as Node gives it: OpenSSL's errors carry `reason` ("sslv3 alert bad certificate"). */
export type LinkError = NodeJS.ErrnoException & { reason?: string };

/** What the link had got to when it failed. */
export interface LinkStage {
  tls: boolean;
  /** The TLS handshake completed (secureConnect). */
  secured: boolean;
  /** Node refused the server's certificate (its chain, or checkServerIdentity): the socket's authorizationError. */
  certificateRefused: boolean;
  /** We offered a client certificate (`cert` or `pfx`). */
  clientCertificate: boolean;
}

/** The verification results that mean "signed by no CA we trust" (OpenSSL's names, Node's `code`). */
const UNTRUSTED_ISSUER = /^(UNABLE_TO_GET_ISSUER_CERT|UNABLE_TO_GET_ISSUER_CERT_LOCALLY|UNABLE_TO_VERIFY_LEAF_SIGNATURE|SELF_SIGNED_CERT_IN_CHAIN|DEPTH_ZERO_SELF_SIGNED_CERT|CERT_UNTRUSTED)$/;
const HOST_NAME = /^(ERR_TLS_CERT_ALTNAME_INVALID|HOSTNAME_MISMATCH)$/;
/** Alerts a server sends about our certificate (bad_certificate 42 ... certificate_required 116). */
const CLIENT_CERTIFICATE_ALERT = /^ERR_SSL_.*ALERT_(BAD_CERTIFICATE|UNSUPPORTED_CERTIFICATE|CERTIFICATE_\w+|UNKNOWN_CA|ACCESS_DENIED)$/;
const NO_COMMON_PROTOCOL = /PROTOCOL_VERSION|UNSUPPORTED_PROTOCOL|NO_PROTOCOLS|CIPHER|HANDSHAKE_FAILURE|INSUFFICIENT_SECURITY/;
/** The bytes that came back are no TLS record: the port speaks something else. */
const NOT_TLS = /^ERR_SSL_(WRONG_VERSION_NUMBER|PACKET_LENGTH_TOO_LONG|UNKNOWN_PROTOCOL|HTTP_REQUEST)$/;

/** Whether a failure of this kind heals by retrying: never when a certificate was refused. */
export function isCertificateFailure(kind: LinkFailureKind): boolean {
  return kind === 'tls-certificate' || kind === 'tls-host-name' || kind === 'tls-client-certificate';
}

/**
 * Whether TLS is what failed: the handshake was refused, or answered with something else than TLS.
 * Not a link closed during the handshake: a server that is not serving closes it so too.
 */
export function isTlsFailure(kind: LinkFailureKind): boolean {
  return (kind.startsWith('tls-') && kind !== 'tls-no-answer') || kind === 'not-tls';
}

/** Classifies an error on a link that reached the server (TCP connected). */
export function classifyLinkError(error: LinkError, stage: LinkStage): { kind: LinkFailureKind; message: string | undefined } {
  const code = error.code ?? '';
  const detail = `${error.reason ?? error.message.trim()}${code && !error.message.includes(code) ? `, ${code}` : ''}`;
  const handshake = (what: string) => `TLS handshake failed: ${what} (${detail})`;
  if (!stage.tls) return { kind: 'other', message: `${error.message}${code && !error.message.includes(code) ? ` (${code})` : ''}` };
  if (HOST_NAME.test(code)) {
    return { kind: 'tls-host-name', message: `${handshake("the server's certificate is not made out to this host name")}: connect by a name it lists, or give that name as tls.servername` };
  }
  if (stage.certificateRefused || UNTRUSTED_ISSUER.test(code) || /^(CERT_|ERROR_IN_CERT_)/.test(code)) {
    return UNTRUSTED_ISSUER.test(code)
      ? { kind: 'tls-certificate', message: `${handshake("the server's certificate is not trusted")}: give the CA that signed it as tls.ca` }
      : { kind: 'tls-certificate', message: handshake("the server's certificate was refused") };
  }
  if (CLIENT_CERTIFICATE_ALERT.test(code)) {
    return stage.clientCertificate
      ? { kind: 'tls-client-certificate', message: `${handshake('the server refused our client certificate')}: it wants one signed by a CA in its trust store` }
      : { kind: 'tls-client-certificate', message: `${handshake('the server requires a client certificate')}: give one as tls.cert and tls.key` };
  }
  if (NOT_TLS.test(code)) return { kind: 'not-tls', message: `does not speak TLS (${detail}): is it the clientPort rather than the secureClientPort?` };
  if (code.startsWith('ERR_SSL_')) {
    return { kind: 'tls-protocol', message: handshake(NO_COMMON_PROTOCOL.test(code) ? 'no TLS version or cipher that both sides accept' : 'the server refused it') };
  }
  if (!stage.secured) return { kind: 'tls-no-answer', message: 'TLS handshake failed: the server closed the connection without a TLS answer' };
  return { kind: 'other', message: `${error.message}${code && !error.message.includes(code) ? ` (${code})` : ''}` };
}
