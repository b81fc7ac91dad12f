// GET /receipts/:receipt_id: a paid call's receipt, public (the id is unguessable: 107 random bits, given
// only to the payer in the answer's x-receipt-id). Written with the call once its answer ended: until then,
// and for an unknown id, 404. Shows what was measured and charged, never the owner's share or keys.
import type { ReceiptRow } from '../db/calls.ts'
import { findReceipt, usageView } from '../db/calls.ts'
import { findDelivery } from '../db/discovery.ts'
import type { Sql } from '../db/sql.ts'
import { writeError } from '../errors.ts'
import { toDollars } from '../money.ts'
import type { Logger } from '../observability/logger.ts'
import { requestIdFrom } from '../request-id.ts'
import { CORS_HEADERS } from './cors.ts'
import type { ReceiptSigner } from './receipt-signer.ts'
import type { HttpRequest, HttpResponse } from './uws.ts'

const RECEIPT_ID = /^rcpt_[0-9A-Za-z]{18}$/

export interface ReceiptRouteDeps {
  sql: Sql
  logger: Logger
  /** Signs the final receipt (what was delivered and charged); absent: unsigned. */
  signing?: { signer: ReceiptSigner; network: string; publicUrl(): string }
}

export function createReceiptRoute(deps: ReceiptRouteDeps) {
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
    Promise.all([findReceipt(deps.sql, id), findDelivery(deps.sql, id)]).then(
      ([row, delivery]) => {
        if (aborted) return
        if (row === null) {
          missing()
          return
        }
        const body = JSON.stringify(withDelivery(presentReceipt(row), row, delivery, deps.signing))
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
    usage: usageView(r),
    created_at: r.created_at.toISOString(),
  }
}

/**
 * The receipt with what the answer delivered (SHA-256 of its body as sent, length; null when it was not
 * delivered whole or is not written yet) and, with a signing key, tollgate's signature over all of it.
 */
function withDelivery(
  receipt: ReturnType<typeof presentReceipt>,
  row: ReceiptRow,
  delivery: { body_sha256: string; body_bytes: number } | null,
  signing: ReceiptRouteDeps['signing'],
) {
  const delivered =
    delivery === null ? null : { body_sha256: delivery.body_sha256, body_bytes: delivery.body_bytes }
  if (signing === undefined) return { ...receipt, delivered, signed: null }
  const signed = signing.signer.callReceipt({
    receiptId: receipt.id ?? '',
    resourceUrl: `${signing.publicUrl()}/m/${row.endpoint_id}`,
    network: signing.network,
    payer: row.payer,
    scheme: row.scheme ?? '',
    amountAtomic: row.amount_atomic.toString(),
    upstreamStatus: row.upstream_status,
    bodySha256: delivery?.body_sha256 ?? '',
    bodyBytes: delivery?.body_bytes ?? 0,
    usage: receipt.usage === null ? '' : JSON.stringify(receipt.usage),
    // The call's time, not the read's: the same receipt signs the same bytes on every read.
    issuedAt: Math.floor(row.created_at.getTime() / 1000),
  })
  return { ...receipt, delivered, signed: { kid: signing.signer.kid, ...signed } }
}

/** GET /.well-known/x402-receipt-keys.json: who signs offers and receipts here, and who signed before. */
export function createReceiptKeysRoute(signer: ReceiptSigner) {
  const body = JSON.stringify(signer.publicKeys())
  return (res: HttpResponse, _req: HttpRequest): void => {
    res.writeStatus('200 OK').writeHeader('content-type', 'application/json; charset=utf-8')
    res.writeHeader('access-control-allow-origin', '*')
    res.writeHeader('cache-control', 'public, max-age=300')
    res.end(body)
  }
}
