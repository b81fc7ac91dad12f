// GET /receipts/:receipt_id: a paid call's receipt, public (the id is unguessable: 107 random bits, given
// only to the payer in the answer's x-receipt-id). Written with the call once its answer ended: until then,
// and for an unknown id, 404. Shows what was measured and charged, never the owner's share or keys, and where
// the payment's settlement stands: its transaction, block and confirmations, its place in a batch.
import type { ReceiptRow } from '../db/calls.ts'
import { agentView, findReceipt, usageView } from '../db/calls.ts'
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
  /** The chain's head block (cached briefly by the client): a settlement's confirmations are counted from it. */
  headBlock?: () => Promise<bigint>
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
    findReceipt(deps.sql, id)
      .then(async (row) => {
        if (row === null) return null
        const delivery =
          row.body_sha256 === null || row.body_bytes === null
            ? null
            : { body_sha256: row.body_sha256, body_bytes: row.body_bytes }
        // The head only when there is a block to count from; a failed read shows no count, not an error.
        const head =
          row.settlement_block !== null && row.settled_at !== null && deps.headBlock !== undefined
            ? await deps.headBlock().catch(() => null)
            : null
        return { row, delivery, head }
      })
      .then(
        (found) => {
          if (aborted) return
          if (found === null) {
            missing()
            return
          }
          const { row, delivery, head } = found
          const receipt = withDelivery(presentReceipt(row, head), row, delivery, deps.signing)
          const body = JSON.stringify(receipt)
          res.cork(() => {
            res.writeStatus('200 OK').writeHeader('content-type', 'application/json; charset=utf-8')
            res.writeHeader('x-request-id', requestId)
            res.writeHeader('access-control-allow-origin', '*')
            // It changes until the delivery is recorded (only digested where receipts are signed) and the
            // settlement is final (settled or failed), and the confirmations keep counting after: cached
            // briefly once final, revalidated before that.
            const final =
              (receipt.delivered !== null || deps.signing === undefined) &&
              (receipt.settlement.status === 'settled' || receipt.settlement.status === 'failed')
            res.writeHeader('cache-control', final ? 'public, max-age=60' : 'no-cache')
            res.end(body)
          })
        },
        (err) => {
          deps.logger.error('receipt lookup failed', { request_id: requestId, err })
          if (aborted) return
          res.cork(() =>
            writeError(
              res,
              'verification_unavailable',
              requestId,
              { message: 'retry shortly' },
              CORS_HEADERS,
            ),
          )
        },
      )
  }
}

export function presentReceipt(r: ReceiptRow, head: bigint | null = null) {
  return {
    id: r.receipt_id,
    object: 'receipt',
    status: 'final',
    // A pass use has no call of its own: its pass, and the purchase call that paid for every use of it.
    call_id: r.pass_id === null ? r.id : null,
    pass: r.pass_id === null ? null : { id: r.pass_id, purchase_call_id: r.id },
    endpoint_id: r.endpoint_id,
    payer: r.payer,
    scheme: r.scheme,
    method: r.method,
    upstream_status: r.upstream_status,
    amount: toDollars(r.amount_atomic),
    amount_atomic: r.amount_atomic.toString(),
    pricing_model: r.pricing_model,
    usage: usageView(r),
    agent: agentView(r),
    settlement: presentSettlement(r, head),
    created_at: r.created_at.toISOString(),
  }
}

/**
 * Where the payment's settlement stands. A transaction-hash payment was settled by the payer's own
 * transaction. Others: pending (not sent yet), sent (a transaction carries it, not known mined), settled
 * (used on chain), failed (never to be: expired unsent, or reverted). block_number is the block of the
 * transaction that used it (null when it was found used some other way); confirmations are counted from the
 * chain's head at this read. batch: the payment's place among the items its transaction carries (exact
 * authorizations, upto permits, or a channel claim's vouchers: one per channel, shared by the calls it pays).
 */
function presentSettlement(r: ReceiptRow, head: bigint | null) {
  if (r.claim_kind === 'tx' || (r.claim_kind === null && r.proof_key.startsWith('tx:'))) {
    const transaction = r.proof_key.startsWith('tx:') ? r.proof_key.slice(3) : null
    return {
      status: 'settled' as const,
      transaction,
      block_number: null,
      confirmations: null,
      batch: null,
      error: null,
    }
  }
  if (r.claim_kind === null) {
    // The claim left with its closed day: settled if its settlement booked the call, else never to be. Its
    // transaction went with the claim.
    const settled = r.settled_revenue
    return {
      status: settled ? ('settled' as const) : ('failed' as const),
      transaction: null,
      block_number: null,
      confirmations: null,
      batch: null,
      error: settled ? null : 'not_settled',
    }
  }
  const status =
    r.settlement_error !== null
      ? ('failed' as const)
      : r.settled_at !== null
        ? ('settled' as const)
        : r.settlement_tx !== null
          ? ('sent' as const)
          : ('pending' as const)
  const block = status === 'settled' ? r.settlement_block : null
  return {
    status,
    transaction: r.settlement_tx,
    block_number: block === null ? null : Number(block),
    // Mined is one confirmation: a head cached from before that block still counts it.
    confirmations: block === null || head === null ? null : head < block ? 1 : Number(head - block + 1n),
    batch:
      r.settlement_tx === null || r.settlement_index === null || r.settlement_count === null
        ? null
        : { transaction: r.settlement_tx, index: r.settlement_index, count: r.settlement_count },
    error: r.settlement_error,
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
    // Who called, as shown above ('' for a call to an endpoint without identity rules).
    agent: receipt.agent === null ? '' : JSON.stringify(receipt.agent),
    // Signed once the chain used the payment ('' before): the signature attests where it settled.
    settlementTx: receipt.settlement.status === 'settled' ? (receipt.settlement.transaction ?? '') : '',
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
