// The undici Agent every upstream call goes through: keep-alive pools per origin, no pipelining, and the
// SSRF guard applied to each socket it opens (not to each request: the check costs nothing per call).
import { isIP } from 'node:net'
import { Agent, buildConnector } from 'undici'
import { guardedLookup, isPrivateAddress } from '../ssrf.ts'

export interface UpstreamDispatcherOptions {
  /** Sockets per upstream origin; unlimited when absent. */
  connections?: number
  allowPrivate: boolean
  /** TCP connect timeout; a request's headers timeout only starts once it is written to a socket. */
  connectTimeoutMs?: number
}

export class UpstreamDispatcher extends Agent {
  /** The policy its sockets enforce; proxy() refuses a target that asks for stricter than this. */
  readonly allowPrivate: boolean

  constructor(options: UpstreamDispatcherOptions) {
    const timeout = options.connectTimeoutMs ?? 10_000
    super({
      connections: options.connections ?? null,
      // One request per socket at a time: a slow upstream answer must not hold up the calls queued behind it.
      pipelining: 1,
      connect: options.allowPrivate ? { timeout } : guardedConnector(timeout),
    })
    this.allowPrivate = options.allowPrivate
  }
}

export function createUpstreamDispatcher(options: UpstreamDispatcherOptions): UpstreamDispatcher {
  return new UpstreamDispatcher(options)
}

/**
 * guardedLookup checks every address a host name resolves to at connect time (DNS may have changed since
 * the endpoint was accepted), but net.connect never calls lookup for an IP literal: those are checked here.
 */
function guardedConnector(timeout: number): buildConnector.connector {
  const connect = buildConnector({ timeout, lookup: guardedLookup })
  return (options, callback) => {
    const host = options.hostname.charCodeAt(0) === 91 ? options.hostname.slice(1, -1) : options.hostname
    if (isIP(host) !== 0 && isPrivateAddress(host)) {
      const err = new Error(`refused to connect to private address ${host}`) as NodeJS.ErrnoException
      // Same code as guardedLookup's refusal, so both reach the caller as one outcome.
      err.code = 'ERR_TOLLGATE_PRIVATE_TARGET'
      callback(err, null)
      return
    }
    connect(options, callback)
  }
}
