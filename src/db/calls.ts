// Queries on metered calls (the captured ones).
import { getAddress } from 'viem'
import type { CallAgent } from '../identity/call-agent.ts'
import { afterCursor } from './cursor.ts'
import type { Sql, Tx } from './sql.ts'

export interface CallRow {
  id: string
  proof_key: string
  endpoint_id: string
  account_id: string
  payer: string
  amount_atomic: bigint
  owner_share_atomic: bigint
  fee_atomic: bigint
  upstream_status: number
  method: string
  /** The MCP tool a paid `tools/call` named; null for HTTP calls. */
  tool: string | null
  created_at: Date
  pricing_model: string
  usage_unit: string | null
  usage: {
    quantities: Record<string, number>
    source: string
    fallback: string | null
    capped: boolean
    /** A WebSocket session's row (src/pricing/model.ts SessionFacts). */
    session?: {
      ended_by?: string
      charge_atomic?: string
      payments?: number
      top_up_call_ids?: string[]
      call_id?: string
    }
  } | null
  /** The prepaid ceiling of a usage price; null for a fixed or rules price. */
  ceiling_atomic: bigint | null
  /** The unused part of the prepaid ceiling, paid back to the payer. */
  refund_atomic: bigint
  /** The scheme that paid (tx-hash, exact, mpp-charge, …); null on rows older than the column. */
  scheme?: string | null
  /** Who called and the rule that priced it (an endpoint with identity rules); null otherwise. */
  agent: CallAgent | null
}

const ADDRESS = /^0x[0-9a-fA-F]{40}$/

/**
 * A payer as the API shows it: an address in its EIP-55 checksummed form, whichever way its row stored it
 * (its bytes since migration 0062, read back as lower-case hex, or its text as the payment gave it).
 */
export function shownPayer(payer: string): string {
  return ADDRESS.test(payer) ? getAddress(payer) : payer
}

export async function listCalls(
  db: Sql | Tx,
  q: {
    accountId: string
    endpointId: string | null
    limit: number
    startingAfter: string | null
    /** Upstream status range [from, to), e.g. 200..300 for 2xx. */
    status?: { from: number; to: number } | null
    createdGte?: Date | null
    createdLt?: Date | null
    tool?: string | null
  },
): Promise<CallRow[]> {
  const rows = await db<CallRow[]>`
    SELECT id, call_proof_key(proof_key, proof) AS proof_key, endpoint_id, account_id,
           call_payer(payer, payer_address) AS payer, amount_atomic, owner_share_atomic, fee_atomic,
           upstream_status, method, tool, created_at, pricing_model, usage_unit, usage, ceiling_atomic,
           refund_atomic, scheme, agent
    FROM calls
    WHERE account_id = ${q.accountId}
    ${q.endpointId ? db`AND endpoint_id = ${q.endpointId}` : db``}
    ${q.status ? db`AND upstream_status >= ${q.status.from} AND upstream_status < ${q.status.to}` : db``}
    ${q.createdGte ? db`AND created_at >= ${q.createdGte}` : db``}
    ${q.createdLt ? db`AND created_at < ${q.createdLt}` : db``}
    ${q.tool ? db`AND tool = ${q.tool}` : db``}
    ${afterCursor(db, 'calls', q.startingAfter, q.accountId)}
    ORDER BY created_at DESC, id DESC
    LIMIT ${q.limit}`
  for (const r of rows) r.payer = shownPayer(r.payer)
  return rows
}

/** A call as its public receipt shows it: by receipt id (unguessable), with its endpoint's name. */
export interface ReceiptRow extends CallRow {
  receipt_id: string
  scheme: string | null
  /** A signed-in call on a pass: the pass it drew on (`id` is then the pass's purchase call). */
  pass_id: string | null
  /**
   * The claim's kind ('tx', 'eip3009', 'batch', 'upto') and its settlement so far; null once the claim left
   * with its day (retention drops a closed day a day past its proofs' horizon, while the call stays).
   */
  claim_kind: string | null
  /** Revenue booked for this call itself (an x402 settlement books it per call): settled, where no claim is left. */
  settled_revenue: boolean
  /** What the answer delivered, from the call row or the record apart; null: not delivered whole (or not yet). */
  body_sha256: string | null
  body_bytes: number | null
  settlement_tx: string | null
  settled_at: Date | null
  settlement_error: string | null
  settlement_block: bigint | null
  settlement_index: number | null
  settlement_count: number | null
}

/**
 * What a usage-priced call measured, as the management API (GET /calls) and the public receipt both show
 * it: one shape in both places. Null for a fixed or rules price.
 */
export function usageView(c: CallRow) {
  if (c.usage === null) return null
  return {
    unit: c.usage_unit,
    quantities: c.usage.quantities,
    charge_atomic: c.amount_atomic.toString(),
    ceiling_atomic: c.ceiling_atomic?.toString() ?? null,
    refunded_atomic: c.refund_atomic.toString(),
    source: c.usage.source,
    fallback: c.usage.fallback,
    capped: c.usage.capped,
  }
}

/**
 * A WebSocket session's row, as GET /calls shows it: the opening row carries the session (its duration,
 * who ended it, its whole charge across its payments, its top-ups' rows); a top-up's row names it. Null for
 * any other call.
 */
export function sessionView(c: CallRow) {
  const s = c.usage?.session
  if (s === undefined) return null
  if (s.call_id !== undefined)
    return {
      call_id: s.call_id,
      duration_ms: null,
      ended_by: null,
      charge_atomic: null,
      payments: null,
      top_up_call_ids: [],
    }
  return {
    call_id: c.id,
    duration_ms: c.usage!.quantities.duration_ms ?? null,
    ended_by: s.ended_by ?? null,
    charge_atomic: s.charge_atomic ?? c.amount_atomic.toString(),
    payments: s.payments ?? 1,
    top_up_call_ids: s.top_up_call_ids ?? [],
  }
}

/** Who called, as GET /calls and the receipt show it (one shape in both places). */
export function agentView(c: CallRow): CallAgent | null {
  const a = c.agent
  if (a === null || a === undefined) return null
  return {
    signer: a.signer,
    keyid: a.keyid ?? null,
    failure: a.failure ?? null,
    rule: a.rule ?? null,
    action: a.action,
  }
}

export async function findReceipt(db: Sql | Tx, receiptId: string): Promise<ReceiptRow | null> {
  // The claim rides along (one statement): the receipt shows where the payment's settlement stands. The
  // call outlives its claim (a closed day of claims leaves a day past its horizon), so the claim is
  // optional: without it, a transaction hash was settled by the payer's own transaction, and any other
  // payment by whether its settlement booked the call's revenue (only a settlement does, per call).
  // What the answer delivered is on the call row, or (a long answer, or one a scheme wrote apart) in its
  // record apart. A signed-in call on a pass has no call row: its receipt is its draw, and the money behind
  // it is the pass's purchase (its claim's settlement), the call itself charged nothing.
  const [row] = await db<ReceiptRow[]>`
    -- By the primary key: a call's id shares its receipt id's random part (migration 0058), and such a
    -- receipt id is stored as '' (migration 0059: call_receipt_id reads it). Calls written before, or whose
    -- ids differ, by the receipt id's index, which holds only those (the same predicate, word for word).
    WITH c AS (
      SELECT * FROM calls
      WHERE id = 'call_' || substr(${receiptId}, 6) AND call_receipt_id(id, receipt_id) = ${receiptId}
      UNION ALL
      SELECT * FROM calls
      WHERE receipt_id = ${receiptId} AND receipt_id <> '' AND substr(receipt_id, 6) <> substr(id, 6)
    )
    SELECT c.id, call_proof_key(c.proof_key, c.proof) AS proof_key, c.endpoint_id, c.account_id,
           call_payer(c.payer, c.payer_address) AS payer, c.amount_atomic, c.owner_share_atomic,
           c.fee_atomic, c.upstream_status, c.method, c.tool, c.created_at,
           call_receipt_id(c.id, c.receipt_id) AS receipt_id, c.scheme,
           c.pricing_model, c.usage_unit, c.usage, c.ceiling_atomic, c.refund_atomic, c.agent,
           NULL::text AS pass_id,
           k.kind AS claim_kind, k.settlement_tx, k.settled_at, k.settlement_error, k.settlement_block,
           k.settlement_index, k.settlement_count,
           -- Booked by its settlement batch (migration 0064), or before it by entries of its own.
           k.kind IS NULL AND (c.ledger_batch_id < 0
                               OR EXISTS (SELECT 1 FROM ledger_entries e
                                          WHERE e.source_type = 'call' AND e.source_id = c.id)) AS settled_revenue,
           coalesce(encode(c.body_sha256, 'hex'), d.body_sha256) AS body_sha256,
           coalesce(c.body_bytes, d.body_bytes)::int AS body_bytes
    FROM c LEFT JOIN claims k ON k.proof_key = call_proof_key(c.proof_key, c.proof)
      LEFT JOIN call_deliveries d ON c.body_sha256 IS NULL AND d.receipt_id = call_receipt_id(c.id, c.receipt_id)
    UNION ALL
    SELECT p.call_id, p.proof_key, p.endpoint_id, p.account_id, p.payer, 0::bigint, 0::bigint, 0::bigint,
           d.upstream_status, d.method, NULL, d.served_at, d.receipt_id, 'pass', 'fixed', NULL, NULL, NULL,
           0::bigint, NULL::jsonb, p.id,
           k.kind, k.settlement_tx, k.settled_at, k.settlement_error, k.settlement_block,
           k.settlement_index, k.settlement_count,
           k.kind IS NULL AND (EXISTS (SELECT 1 FROM calls b WHERE b.id = p.call_id AND b.ledger_batch_id < 0)
                               OR EXISTS (SELECT 1 FROM ledger_entries e
                                          WHERE e.source_type = 'call' AND e.source_id = p.call_id)),
           v.body_sha256, v.body_bytes::int
    FROM pass_draws d JOIN passes p ON p.id = d.pass_id LEFT JOIN claims k ON k.proof_key = p.proof_key
      LEFT JOIN call_deliveries v ON v.receipt_id = d.receipt_id
    WHERE d.receipt_id = ${receiptId}
    LIMIT 1`
  if (row === undefined) return null
  row.payer = shownPayer(row.payer)
  return row
}
