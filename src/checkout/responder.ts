// One answer per checkout request: set up before the first await (onAborted), written once, corked, counted,
// with the request id on the answer and in its log line (a 5xx always, others when the access log is on).

import { EXPOSED_HEADERS } from '../data-plane/cors.ts'
import type { HttpRequest, HttpResponse } from '../data-plane/uws.ts'
import { statusLine } from '../data-plane/uws.ts'
import { ERRORS, type ErrorCode, errorBody } from '../errors.ts'
import type { Logger } from '../observability/logger.ts'
import { httpDuration, httpRequests, statusClass } from '../observability/metrics.ts'
import { requestIdFrom } from '../request-id.ts'
import { mppCredential } from '../wire/proof.ts'

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
  /** The client's rate-limit key, read only when a proof came ('' otherwise). */
  client: string
  /** The caller's x-request-id when sane, else a new one. */
  requestId: string
}

export interface Responder {
  readonly aborted: boolean
  readonly requestId: string
  send(status: number, type: string, body: string | Buffer, headers?: Headers, cacheControl?: string): void
  /** An error answer from the registry (src/errors.ts), with the request id. */
  sendError(code: ErrorCode, message?: string, extra?: Record<string, unknown>, headers?: Headers): void
  /** Records what made a 5xx, for its one log line. */
  failed(err: unknown): void
}

export function readRequest(req: HttpRequest): CheckoutRequest {
  const id = req.getParameter(0) ?? ''
  return {
    id,
    method: req.getCaseSensitiveMethod().toUpperCase(),
    rest: req.getUrl().slice('/pay/'.length + id.length),
    wantsHtml: req.getHeader('accept').includes('text/html'),
    proofHeader:
      req.getHeader('x-payment') ||
      req.getHeader('payment-signature') ||
      mppCredential(req.getHeader('authorization')),
    client: '',
    requestId: requestIdFrom(req.getHeader('x-request-id')),
  }
}

export function createResponder(res: HttpResponse, request: CheckoutRequest, logger: Logger): Responder {
  const startedMs = performance.now()
  const requestId = request.requestId
  let done = false
  /** What made a 5xx, for its one log line. */
  let failure: unknown
  res.onAborted(() => {
    done = true
  })
  const responder: Responder = {
    get aborted() {
      return done
    },
    requestId,
    failed(err) {
      failure = err
      if (done)
        logger.error('checkout request failed', { request_id: requestId, payment_id: request.id, err })
    },
    send(status, type, body, headers = [], cacheControl = 'no-store') {
      if (done) return
      done = true
      const cls = statusClass(status)
      httpRequests.labels('checkout', cls).inc()
      httpDuration.labels('checkout', cls).observe((performance.now() - startedMs) / 1000)
      if (status >= 500) {
        logger.error('checkout request failed', {
          request_id: requestId,
          payment_id: request.id,
          status,
          err: failure,
        })
      } else if (logger.access.on && logger.access.sample()) {
        logger.info('access', {
          route: 'checkout',
          request_id: requestId,
          payment_id: request.id,
          method: request.method,
          status,
        })
      }
      res.cork(() => {
        res
          .writeStatus(statusLine(status))
          .writeHeader('content-type', type)
          .writeHeader('cache-control', cacheControl)
          .writeHeader('x-content-type-options', 'nosniff')
          .writeHeader('x-request-id', requestId)
          // A checkout may be paid from a script on another origin (cors.ts).
          .writeHeader('access-control-allow-origin', '*')
          .writeHeader('access-control-expose-headers', EXPOSED_HEADERS)
        for (const [k, v] of headers) res.writeHeader(k, v)
        res.end(body)
      })
    },
    sendError(code, message, extra, headers) {
      responder.send(ERRORS[code].status, JSON_TYPE, errorBody(code, requestId, { message, extra }), headers)
    },
  }
  return responder
}

/** The error code of a payment that takes no payment now. */
export function stateCode(status: string): ErrorCode {
  return status === 'paid' ? 'payment_paid' : status === 'canceled' ? 'payment_canceled' : 'payment_expired'
}
