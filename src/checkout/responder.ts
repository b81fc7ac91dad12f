// One answer per checkout request: set up before the first await (onAborted), written once, corked, counted.

import { nextRequestId } from '../data-plane/request-id.ts'
import type { HttpRequest, HttpResponse } from '../data-plane/uws.ts'
import { statusLine } from '../data-plane/uws.ts'
import { httpDuration, httpRequests, statusClass } from '../observability/metrics.ts'

export const JSON_TYPE = 'application/json; charset=utf-8'
export const HTML_TYPE = 'text/html; charset=utf-8'

export type Headers = Array<[string, string]>

/** What the route reads from the uWS request, synchronously (the request dies with the callback). */
export interface CheckoutRequest {
  id: string
  method: string
  /** The path after /pay/:id ('' or '/status', '/qr.svg', …). */
  rest: string
  wantsHtml: boolean
  proofHeader: string
}

export interface Responder {
  readonly aborted: boolean
  send(status: number, type: string, body: string | Buffer, headers?: Headers, cacheControl?: string): void
  sendError(status: number, code: string, message: string, extra?: Record<string, unknown>): void
}

export function readRequest(req: HttpRequest): CheckoutRequest {
  const id = req.getParameter(0) ?? ''
  return {
    id,
    method: req.getCaseSensitiveMethod().toUpperCase(),
    rest: req.getUrl().slice('/pay/'.length + id.length),
    wantsHtml: req.getHeader('accept').includes('text/html'),
    proofHeader: req.getHeader('x-payment') || req.getHeader('payment-signature'),
  }
}

export function createResponder(res: HttpResponse): Responder {
  const startedMs = performance.now()
  let done = false
  res.onAborted(() => {
    done = true
  })
  const responder: Responder = {
    get aborted() {
      return done
    },
    send(status, type, body, headers = [], cacheControl = 'no-store') {
      if (done) return
      done = true
      const cls = statusClass(status)
      httpRequests.labels('checkout', cls).inc()
      httpDuration.labels('checkout', cls).observe((performance.now() - startedMs) / 1000)
      res.cork(() => {
        res
          .writeStatus(statusLine(status))
          .writeHeader('content-type', type)
          .writeHeader('cache-control', cacheControl)
          .writeHeader('x-content-type-options', 'nosniff')
        for (const [k, v] of headers) res.writeHeader(k, v)
        res.end(body)
      })
    },
    sendError(status, code, message, extra = {}) {
      responder.send(
        status,
        JSON_TYPE,
        JSON.stringify({
          error: { type: 'invalid_request_error', code, message },
          ...extra,
          request_id: nextRequestId(),
        }),
      )
    },
  }
  return responder
}
