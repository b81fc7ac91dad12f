// The public uWS app: mounts /m/* (metered hot path), /pay/* (checkout) and hands /api/v1/* to the
// control-plane handler it is given. Reads each request synchronously, then answers after the await.
import { writeError } from '../errors.ts'
import type { ApiHandler } from '../http-exchange.ts'
import type { Logger } from '../observability/logger.ts'
import { httpRequests, statusClass } from '../observability/metrics.ts'
import { requestIdFrom } from '../request-id.ts'
import {
  assertNativeUws,
  type HttpRequest,
  type HttpResponse,
  statusLine,
  type TemplatedApp,
  uws,
} from './uws.ts'

export type UwsRoute = (res: HttpResponse, req: HttpRequest) => void

export interface PublicAppOptions {
  bodyLimitBytes: number
  apiHandler: ApiHandler
  /** Where a failure of the API handler itself is logged (it answers 500). */
  logger?: Logger
  /** ANY /m/:endpoint_id and /m/:endpoint_id/* */
  metered?: UwsRoute
  /** /pay/:payment_id (page, status, agent payment) */
  checkout?: UwsRoute
}

export interface Listening {
  port: number
  close(): void
}

const API_ERROR_HEADERS = 'application/json; charset=utf-8'

export function createPublicApp(options: PublicAppOptions): TemplatedApp {
  assertNativeUws()
  const app = uws.App()
  const api = apiBridge(options)
  app.any('/api/v1', api)
  app.any('/api/v1/*', api)
  if (options.metered) {
    app.any('/m/:endpoint_id', options.metered)
    app.any('/m/:endpoint_id/*', options.metered)
  }
  if (options.checkout) {
    app.any('/pay/:payment_id', options.checkout)
    app.any('/pay/:payment_id/*', options.checkout)
  }
  app.get('/', (res, req) => {
    res
      .writeHeader('content-type', API_ERROR_HEADERS)
      .writeHeader('x-request-id', requestIdFrom(req.getHeader('x-request-id')))
      .end('{"service":"tollgate","api":"/api/v1"}')
  })
  app.any('/*', (res, req) => {
    const requestId = requestIdFrom(req.getHeader('x-request-id'))
    httpRequests.labels('other', '4xx').inc()
    writeError(res, 'route_not_found', requestId, {
      message: `no route ${req.getMethod().toUpperCase()} ${req.getUrl()}`,
    })
  })
  return app
}

export function listen(app: TemplatedApp, host: string, port: number): Promise<Listening> {
  return new Promise((resolve, reject) => {
    app.listen(host, port, (socket) => {
      if (!socket) return reject(new Error(`cannot listen on ${host}:${port} (in use or not permitted)`))
      resolve({ port: uws.us_socket_local_port(socket), close: () => uws.us_listen_socket_close(socket) })
    })
  })
}

/** Collects the request (bounded), calls the control-plane handler, writes its answer. */
function apiBridge(options: PublicAppOptions): UwsRoute {
  const limit = options.bodyLimitBytes
  return (res, req) => {
    const method = req.getMethod().toUpperCase()
    const path = req.getUrl()
    const query = req.getQuery() ?? ''
    const headers: Record<string, string> = {}
    req.forEach((k, val) => {
      headers[k] = headers[k] === undefined ? val : `${headers[k]}, ${val}`
    })
    const requestId = requestIdFrom(headers['x-request-id'])
    const remoteAddress = Buffer.from(res.getRemoteAddressAsText()).toString()
    let aborted = false
    res.onAborted(() => {
      aborted = true
    })
    const tooLarge = () => {
      if (aborted) return
      aborted = true
      httpRequests.labels('api', '4xx').inc()
      res.cork(() => {
        // Close after answering: the rest of the oversized body is not worth reading.
        writeError(
          res,
          'body_too_large',
          requestId,
          { message: `the body exceeds ${limit} bytes` },
          undefined,
          true,
        )
      })
    }
    const declared = Number(headers['content-length'] ?? 0)
    if (declared > limit) return tooLarge()

    const chunks: Buffer[] = []
    let size = 0
    res.onData((chunk, isLast) => {
      if (aborted) return
      size += chunk.byteLength
      if (size > limit) return tooLarge()
      // uWS reuses the ArrayBuffer after this callback: copy it.
      chunks.push(Buffer.from(new Uint8Array(chunk).slice()))
      if (!isLast) return
      const body = chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks)
      options
        .apiHandler({ method, path, query, headers, body, remoteAddress, requestId })
        .then((response) => {
          if (aborted) return
          res.cork(() => {
            res.writeStatus(statusLine(response.status))
            for (const name in response.headers) res.writeHeader(name, response.headers[name]!)
            res.end(response.body)
          })
        })
        .catch((err) => {
          options.logger?.error('api handler failed', { request_id: requestId, path, err })
          if (aborted) return
          res.cork(() => {
            writeError(res, 'internal_error', requestId)
          })
        })
    })
  }
}

export { statusClass }
