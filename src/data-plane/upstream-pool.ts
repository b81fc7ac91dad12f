// The client every upstream call goes through: keep-alive sockets per origin, one request at a time on each
// (a slow upstream answer must not hold up the calls queued behind it), and the SSRF guard applied to each
// socket it opens (not to each request: the check costs nothing per call). tollgate's own HTTP/1.1 client
// by default (src/data-plane/upstream-client/), undici's Agent with `proxy.upstream_client: "undici"`.
import { Agent, buildConnector, type Dispatcher } from 'undici'
import { guardedConnector } from '../ssrf.ts'
import { LeanDispatcher, readIntoOwnBuffer } from './upstream-client/lean-dispatcher.ts'

export type UpstreamClientKind = 'lean' | 'undici'

export interface UpstreamDispatcherOptions {
  /** Sockets per upstream origin; unlimited when absent. */
  connections?: number
  allowPrivate: boolean
  /** TCP connect timeout; a request's headers timeout only starts once it is written to a socket. */
  connectTimeoutMs?: number
  client?: UpstreamClientKind
}

export interface UpstreamDispatcher {
  /** The policy its sockets enforce; proxy() refuses a target that asks for stricter than this. */
  readonly allowPrivate: boolean
  dispatch(options: Dispatcher.DispatchOptions, handler: Dispatcher.DispatchHandler): boolean
  close(): Promise<void>
}

class UndiciUpstream extends Agent implements UpstreamDispatcher {
  readonly allowPrivate: boolean

  constructor(options: UpstreamDispatcherOptions, timeout: number) {
    super({
      connections: options.connections ?? null,
      pipelining: 1,
      connect: options.allowPrivate ? { timeout } : guardedConnector(timeout),
    })
    this.allowPrivate = options.allowPrivate
  }
}

export function createUpstreamDispatcher(options: UpstreamDispatcherOptions): UpstreamDispatcher {
  const timeout = options.connectTimeoutMs ?? 10_000
  if (options.client === 'undici') return new UndiciUpstream(options, timeout)
  return new LeanDispatcher({
    connections: options.connections ?? null,
    allowPrivate: options.allowPrivate,
    connect: options.allowPrivate
      ? buildConnector({ timeout, onread: readIntoOwnBuffer })
      : guardedConnector(timeout, { onread: readIntoOwnBuffer }),
  })
}
