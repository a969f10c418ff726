// The tests' TCP proxy is the one the chaos runner uses (scripts/support/tcp-proxy.mjs).
export { TcpProxy } from '../../scripts/support/tcp-proxy.mjs';
