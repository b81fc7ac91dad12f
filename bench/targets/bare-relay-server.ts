// A bare uWS app relaying every request to the bench's upstream through tollgate's own proxy() (the same
// dispatcher, header hygiene, corked writes and backpressure as a metered call), with no endpoint look-up,
// proof, claim or capture: what the relay alone costs, beside nginx relaying the same answers.

import { CORS_PAIRS } from '../../src/data-plane/cors.ts'
import {
  type AbortState,
  createRequestBody,
  createUpstreamDispatcher,
  type ForwardRequest,
  type ProxyHooks,
  proxy,
  type UpstreamTarget,
} from '../../src/data-plane/proxy.ts'
import { type HttpRequest, type HttpResponse, hideServerBanner, uws } from '../../src/data-plane/uws.ts'
import { requestIdFrom } from '../../src/request-id.ts'

const origin = new URL(process.env.UPSTREAM_URL!)
// UPSTREAM_CLIENT=undici measures undici's Agent, as tollgate's own setting does.
const dispatcher = createUpstreamDispatcher({
  allowPrivate: true,
  client: process.env.UPSTREAM_CLIENT === 'undici' ? 'undici' : 'lean',
})
const target: UpstreamTarget = {
  origin: origin.origin,
  basePath: '',
  host: origin.host,
  injectHeaders: [],
  timeoutMs: 30_000,
  allowPrivate: true,
}

/** The headers a free metered call adds (metered.ts's onResponseHead for an unpaid forward). */
class FreeCall implements ProxyHooks {
  constructor(readonly requestId: string) {}
  onResponseHead(): Array<[string, string]> {
    return [['x-request-id', this.requestId], CORS_PAIRS[0]!, CORS_PAIRS[1]!]
  }
  onDone(): void {}
}

function relay(res: HttpResponse, req: HttpRequest): void {
  const abort: AbortState = { aborted: false, onAbort: null }
  res.onAborted(() => {
    abort.aborted = true
    abort.onAbort?.()
  })
  const query = req.getQuery()
  const headers: Array<[string, string]> = []
  req.forEach((k, v) => {
    headers.push([k, v])
  })
  const requestId = requestIdFrom(req.getHeader('x-request-id'))
  const forward: ForwardRequest = {
    method: req.getCaseSensitiveMethod().toUpperCase(),
    pathAndQuery: req.getUrl() + (query ? `?${query}` : ''),
    headers,
    remoteAddress: Buffer.from(res.getRemoteAddressAsText()).toString(),
    peerTrusted: false,
    requestId,
    traceparent: null,
  }
  const body = createRequestBody(res, 64 * 1024)
  proxy(dispatcher, res, forward, body, target, abort, new FreeCall(requestId))
}

hideServerBanner()
uws
  .App()
  .any('/*', relay)
  .listen('127.0.0.1', 0, (socket) => {
    process.stdout.write(`${JSON.stringify({ port: uws.us_socket_local_port(socket) })}\n`)
  })
setTimeout(() => process.exit(0), Number(process.env.MAX_MS ?? 600_000)).unref()
process.on('SIGTERM', () => process.exit(0))
