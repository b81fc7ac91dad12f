// GET /receipts/:receipt_id: a paid call's receipt, public (the id is unguessable: 107 random bits, given
// only to the payer in the answer's x-receipt-id). Written with the call once its answer ended: until then,
// and for an unknown id, 404. Shows what was measured and charged, never the owner's share or keys.
import type { ReceiptRow } from '../db/calls.ts'
import { findReceipt } from '../db/calls.ts'
import type { Sql } from '../db/sql.ts'
import { writeError } from '../errors.ts'
import { toDollars } from '../money.ts'
import type { Logger } from '../observability/logger.ts'
import { requestIdFrom } from '../request-id.ts'
import { CORS_HEADERS } from './cors.ts'
import type { HttpRequest, HttpResponse } from './uws.ts'

const RECEIPT_ID = /^rcpt_[0-9A-Za-z]{18}$/

export function createReceiptRoute(deps: { sql: Sql; logger: Logger }) {
  return function receipts(res: HttpResponse, req: HttpRequest): void {
    const id = req.getParameter(0) ?? ''
    const requestId = requestIdFrom(req.getHeader('x-request-id'))
    let aborted = false
    res.onAborted(() => {
      aborted = true
    })
    const missing = (): void => {
      res.cork(() =>
        writeError(
          res,
          'not_found',
          requestId,
          { message: `no receipt ${id}: unknown, or its call has not ended yet` },
          CORS_HEADERS,
        ),
      )
    }
    if (!RECEIPT_ID.test(id)) {
      missing()
      return
    }
    findReceipt(deps.sql, id).then(
      (row) => {
        if (aborted) return
        if (row === null) {
          missing()
          return
        }
        const body = JSON.stringify(presentReceipt(row))
        res.cork(() => {
          res.writeStatus('200 OK').writeHeader('content-type', 'application/json; charset=utf-8')
          res.writeHeader('x-request-id', requestId)
          res.writeHeader('access-control-allow-origin', '*')
          // Final once written: a receipt never changes.
          res.writeHeader('cache-control', 'public, max-age=86400, immutable')
          res.end(body)
        })
      },
      (err) => {
        deps.logger.error('receipt lookup failed', { request_id: requestId, err })
        if (aborted) return
        res.cork(() =>
          writeError(res, 'verification_unavailable', requestId, { message: 'retry shortly' }, CORS_HEADERS),
        )
      },
    )
  }
}

export function presentReceipt(r: ReceiptRow) {
  return {
    id: r.receipt_id,
    object: 'receipt',
    status: 'final',
    call_id: r.id,
    endpoint_id: r.endpoint_id,
    payer: r.payer,
    scheme: r.scheme,
    method: r.method,
    upstream_status: r.upstream_status,
    amount: toDollars(r.amount_atomic),
    amount_atomic: r.amount_atomic.toString(),
    pricing_model: r.pricing_model,
    usage:
      r.usage === null
        ? null
        : {
            unit: r.usage_unit,
            quantities: r.usage.quantities,
            charge_atomic: r.amount_atomic.toString(),
            ceiling_atomic: r.ceiling_atomic?.toString() ?? null,
            refunded_atomic: r.refund_atomic.toString(),
            source: r.usage.source,
            fallback: r.usage.fallback,
            capped: r.usage.capped,
          },
    created_at: r.created_at.toISOString(),
  }
}
