// The undici Agent every upstream call goes through: keep-alive pools per origin, no pipelining, and the
// SSRF guard applied to each socket it opens (not to each request: the check costs nothing per call).
import { Agent } from 'undici'
import { guardedConnector } from '../ssrf.ts'

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
