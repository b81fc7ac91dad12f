// The facilitator's room: an x402 `exact` authorization or `upto` permit a merchant's own middleware sent
// tollgate to settle (/api/v1/facilitator/settle). It is claimed by the same claim as every proof (its
// proof_key is the one a metered call would claim), under the same payer reservation, so it settles once,
// here or on a metered URL; the settlement batcher (exact) or the upto settlement job sends it with the
// calls', and settleAuthorizations or settleUptoClaims hands it back here, in its transaction, once used.
import type { StoredAuthorization } from '../chain/settle.ts'
import type { StoredUptoPermit } from '../chain/upto-permit.ts'
import { insertEvents } from '../db/events.ts'
import type { Sql, Tx } from '../db/sql.ts'
import type { FacilitatorResource } from '../discovery/facilitator-resource.ts'
import { newId } from '../ids.ts'
import { splitOwnerShare } from '../money.ts'

type Db = Sql | Tx

/** Where the money goes: the treasury (booked like a metered call) or the account's own wallet (only sent). */
export type Custody = 'treasury' | 'merchant'

export interface FacilitatorSettlementRow {
  id: string
  account_id: string
  proof_key: string
  payment_identifier: string | null
  custody: Custody
  pay_to: string
  payer: string
  amount_atomic: bigint
  owner_share_atomic: bigint
  fee_atomic: bigint
  network: string
  x402_version: number
  created_at: Date
  settled_at: Date | null
  settlement_tx: string | null
}

/** A settlement with its claim's state: where its authorization is on its way to the chain. */
export interface FacilitatorSettlementState extends FacilitatorSettlementRow {
  claim_status: string
  claim_settlement_tx: string | null
  settlement_error: string | null
}

export type FacilitatorClaim =
  /** claimed: new; existing: the same payload (or payment id) was claimed before by this account. */
  | { kind: 'claimed' | 'existing' }
  /** Its authorization is another's claim: a metered call, a checkout, or another account's settlement. */
  | { kind: 'proof_already_used' }
  /** The payment-identifier was used by this account for another payload. */
  | { kind: 'payment_identifier_conflict' }
  /** The payer's balance as read, less what its other unsettled payments hold, does not cover this one. */
  | { kind: 'insufficient_funds' }

export interface FacilitatorClaimRequest {
  accountId: string
  proofKey: string
  paymentIdentifier: string | null
  custody: Custody
  payTo: string
  payer: string
  valueAtomic: bigint
  network: string
  x402Version: 1 | 2
  /** eip3009: an `exact` authorization; upto: a Permit2 permit, settled for valueAtomic (≤ its maximum). */
  kind: 'eip3009' | 'upto'
  authorization: StoredAuthorization | StoredUptoPermit
  ownerShareBps: number
  /** The payer's balance and the block it reflects: the claim holds valueAtomic on top of what is reserved. */
  reserve: { balanceAtomic: bigint; block: bigint }
  /** The resource the payload's bazaar extension describes: cataloged with the claim (null: none). */
  resource?: FacilitatorResource | null
  /** The claiming process sends it in its own group commit: the leader's batch leaves it alone a while. */
  groupCommit?: boolean
}

/**
 * ∅ → settling: each payload's settlement row and its claim, the group in one transaction (one commit for
 * the /settle requests that arrived together, not one each) of two statements, whatever its size:
 *
 * 1. the payers' locks and what each payer's other unsettled payments hold (payer_reserved, migrations 0045,
 *    0065, 0070: on any instance, here or on a metered URL), all taken before the first row is written, in
 *    hashtext order as a metered claim statement takes them (two groups, or a group and a metered batch,
 *    never wait on each other in a cycle); then the settlement rows, ON CONFLICT DO NOTHING: a retry (same
 *    payload, or same payment-identifier) inserts nothing, and a concurrent twin waits for the first's commit;
 * 2. the claims of the payloads the payer's balance covers, decided here in the requests' order as if each
 *    were alone: the balance read, less the reservation, less this group's earlier claims of that payer
 *    (one another path claimed meanwhile still counts: a false refusal at most, never an over-claim); and in
 *    the same statement the rows of those refused or claimed elsewhere are deleted (as a rollback would
 *    leave them: never there).
 *
 * It was a statement a payload, each summing the reservation again: the group's round trips and their
 * statements' fixed cost grew with the group. A payload that inserted nothing is then read (earlier):
 * retries only. Answers come back in the requests' order.
 */
export async function claimFacilitatorPayments(
  sql: Sql,
  requests: FacilitatorClaimRequest[],
): Promise<FacilitatorClaim[]> {
  // The settlement rows go in in (payer, proof) order, as before: two groups inserting the same payloads
  // meet them in the same order.
  const order: Ordered[] = requests
    .map((q, i) => ({ q, i, id: newId('fst') }))
    .sort(
      (a, b) =>
        compare(a.q.payer.toLowerCase(), b.q.payer.toLowerCase()) || compare(a.q.proofKey, b.q.proofKey),
    )
  const out = new Array<FacilitatorClaim>(requests.length)
  await sql.begin(async (tx) => {
    const { reserved, uptoOpen, inserted } = await reserveAndInsertRows(tx, order)
    // In the requests' order (payer, proof), each against what the payer's earlier ones here took.
    const held = new Map<string, bigint>()
    const funded: Ordered[] = []
    const refused: string[] = []
    for (const o of order) {
      if (!inserted.has(o.id)) continue
      const payer = o.q.payer.toLowerCase()
      const taken = held.get(payer) ?? 0n
      if (
        o.q.reserve.balanceAtomic - (reserved.get(payer) ?? 0n) - taken >= o.q.valueAtomic &&
        uptoAllowanceFree(o.q, uptoOpen, payer)
      ) {
        held.set(payer, taken + o.q.valueAtomic)
        funded.push(o)
      } else {
        refused.push(o.id)
        out[o.i] = { kind: 'insufficient_funds' }
      }
    }
    const claimed = await claimFundedDropRefused(tx, funded, refused)
    for (const { q, i, id } of funded) {
      if (!claimed.has(id)) {
        out[i] = { kind: 'proof_already_used' }
        continue
      }
      if (q.resource) await catalogResource(tx, q.accountId, q.resource)
      out[i] = { kind: 'claimed' }
    }
    // Retries (the same payload, or its payment-identifier): the row that was there first.
    for (const { q, i, id } of order) if (!inserted.has(id)) out[i] = await earlier(tx, q)
  })
  return out
}

/**
 * An upto permit and the payer's Permit2 allowance (migration 0081, as the metered claim's rule): a
 * sponsored one (its eip2612GasSponsoring approval sets the allowance to its own maximum) only when the
 * payer has no other upto permit unsettled, any other only while no sponsored one is. `open` holds the
 * payer's state, and is moved on by each upto permit funded here (the group's earlier ones count).
 */
function uptoAllowanceFree(q: FacilitatorClaimRequest, open: Map<string, string>, payer: string): boolean {
  if (q.kind !== 'upto') return true
  const state = open.get(payer) ?? 'none'
  const sponsored = (q.authorization as StoredUptoPermit).permit2612 !== undefined
  if (sponsored ? state !== 'none' : state === 'sponsored') return false
  open.set(payer, sponsored ? 'sponsored' : 'open')
  return true
}

/** A request of the group, where its answer goes (i) and its settlement row's id. */
interface Ordered {
  q: FacilitatorClaimRequest
  i: number
  id: string
}

/**
 * The group's first statement: its payers' locks and reservations (each payer at the earliest block its
 * requests read), all taken before the first row goes in, then the settlement rows that are new.
 */
async function reserveAndInsertRows(
  tx: Tx,
  order: Ordered[],
): Promise<{ reserved: Map<string, bigint>; uptoOpen: Map<string, string>; inserted: Set<string> }> {
  const rows = order.map(({ q, id }, i) => {
    const { owner, fee } =
      q.custody === 'treasury' ? splitOwnerShare(q.valueAtomic, q.ownerShareBps) : { owner: 0n, fee: 0n }
    return {
      i,
      id,
      account_id: q.accountId,
      proof_key: q.proofKey,
      payment_identifier: q.paymentIdentifier,
      custody: q.custody,
      pay_to: q.payTo.toLowerCase(),
      payer: q.payer.toLowerCase(),
      amount: q.valueAtomic.toString(),
      owner_share: owner.toString(),
      fee: fee.toString(),
      network: q.network,
      x402_version: q.x402Version,
      resource_url: q.resource?.url ?? null,
      group_commit: q.groupCommit ?? false,
      block: q.reserve.block.toString(),
      kind: q.kind,
      // The chain's EIP-2612 nonce, as a sponsored permit's approval was checked against it (migration 0081).
      approval_nonce: (q.authorization as Partial<StoredUptoPermit>).permit2612?.nonce ?? null,
    }
  })
  const upto = order.some((o) => o.q.kind === 'upto')
  // payer_upto_open (migration 0081) only for groups with upto permits, under the same lock.
  const open = upto
    ? tx`CASE WHEN has_upto THEN payer_upto_open(payer_l, approval_nonce) END`
    : tx`NULL::text`
  const written = await tx<
    { kind: 'payer' | 'row'; key: string; reserved: string | null; upto_open: string | null }[]
  >`
    WITH req AS MATERIALIZED (
      SELECT * FROM json_to_recordset(${JSON.stringify(rows)}::text::json)
        AS t(i int, id text, account_id text, proof_key text, payment_identifier text, custody text,
             pay_to text, payer text, amount bigint, owner_share bigint, fee bigint, network text,
             x402_version int, resource_url text, group_commit boolean, block bigint, kind text,
             approval_nonce numeric)
    ),
    payers AS MATERIALIZED (
      SELECT payer_l, payer_reserved(payer_l, since) AS reserved, ${open} AS upto_open FROM (
        SELECT payer AS payer_l, min(block) AS since, bool_or(kind = 'upto') AS has_upto,
               min(approval_nonce) AS approval_nonce FROM req
        GROUP BY payer ORDER BY hashtext(payer), payer OFFSET 0
      ) p
    ),
    inserted AS (
      INSERT INTO facilitator_settlements (id, account_id, proof_key, payment_identifier, custody, pay_to,
        payer, amount_atomic, owner_share_atomic, fee_atomic, network, x402_version, resource_url, group_commit)
      -- Sorted after the join: every lock of "payers" is taken before the first row goes in.
      SELECT r.id, r.account_id, r.proof_key, r.payment_identifier, r.custody, r.pay_to, r.payer, r.amount,
             r.owner_share, r.fee, r.network, r.x402_version, r.resource_url, r.group_commit
      FROM req r JOIN payers p ON p.payer_l = r.payer ORDER BY r.i
      ON CONFLICT DO NOTHING RETURNING id
    )
    SELECT 'payer' AS kind, payer_l AS key, reserved::text AS reserved, upto_open FROM payers
    UNION ALL SELECT 'row', id, NULL, NULL FROM inserted`
  const reserved = new Map<string, bigint>()
  const uptoOpen = new Map<string, string>()
  const inserted = new Set<string>()
  for (const w of written) {
    if (w.kind === 'payer') {
      reserved.set(w.key, BigInt(w.reserved!))
      if (w.upto_open !== null) uptoOpen.set(w.key, w.upto_open)
    } else inserted.add(w.key)
  }
  return { reserved, uptoOpen, inserted }
}

/**
 * The group's second statement: the claims of the payloads their payers' balances cover, and the settlement
 * rows of those refused, or claimed elsewhere meanwhile, deleted. Answers the rows whose claim went in.
 */
async function claimFundedDropRefused(tx: Tx, funded: Ordered[], refused: string[]): Promise<Set<string>> {
  const claimed = new Set<string>()
  if (funded.length === 0 && refused.length === 0) return claimed
  const claims = funded.map(({ q, id }) => ({
    id,
    proof_key: q.proofKey,
    kind: q.kind,
    account_id: q.accountId,
    payer: q.payer,
    amount: q.valueAtomic.toString(),
    auth: q.authorization,
  }))
  const got = await tx<{ id: string }[]>`
    WITH c AS MATERIALIZED (
      SELECT * FROM json_to_recordset(${JSON.stringify(claims)}::text::json)
        AS t(id text, proof_key text, kind text, account_id text, payer text, amount bigint, auth jsonb)
    ),
    claimed AS (
      INSERT INTO claims (proof_key, kind, target_type, target_id, account_id, payer, amount_atomic, status,
                          authorization_payload, horizon_at)
      SELECT proof_key, kind, 'facilitator', id, account_id, payer, amount, 'settling', auth,
             claim_horizon_at(kind, NULL, auth)
      FROM c
      ON CONFLICT (proof_key, horizon_at) DO NOTHING RETURNING target_id
    ),
    gone AS (
      DELETE FROM facilitator_settlements
      WHERE id = ANY(${[...refused, ...funded.map((f) => f.id)]}::text[])
        AND id NOT IN (SELECT target_id FROM claimed)
    )
    SELECT target_id AS id FROM claimed`
  for (const g of got) claimed.add(g.id)
  return claimed
}

function compare(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0
}

/** The catalog row of a resource a claimed payment described: the latest payment's terms and extension. */
async function catalogResource(tx: Tx, accountId: string, r: FacilitatorResource): Promise<void> {
  await tx`
    INSERT INTO facilitator_resources (account_id, resource_url, type, x402_version, accepts, extensions,
      description, mime_type, service_name, tags, icon_url, price_atomic)
    VALUES (${accountId}, ${r.url}, ${r.type}, ${r.x402Version}, ${tx.json([r.accepted] as never)}, ${tx.json(r.extensions as never)},
      ${r.description}, ${r.mimeType}, ${r.serviceName}, ${r.tags === null ? null : tx.json(r.tags)}, ${r.iconUrl},
      ${r.priceAtomic})
    ON CONFLICT (account_id, resource_url) DO UPDATE SET type = excluded.type,
      x402_version = excluded.x402_version, accepts = excluded.accepts,
      extensions = excluded.extensions, description = excluded.description, mime_type = excluded.mime_type,
      service_name = excluded.service_name, tags = excluded.tags, icon_url = excluded.icon_url,
      price_atomic = excluded.price_atomic, updated_at = now()`
}

/** The row that made this one's insert a no-op: the same payload (a retry) or the same payment id. */
async function earlier(tx: Tx, q: FacilitatorClaimRequest): Promise<FacilitatorClaim> {
  const [row] = await tx<FacilitatorSettlementRow[]>`
    SELECT * FROM facilitator_settlements
    WHERE proof_key = ${q.proofKey}
       OR (account_id = ${q.accountId} AND payment_identifier = ${q.paymentIdentifier})
    ORDER BY (proof_key = ${q.proofKey}) DESC LIMIT 1`
  if (!row) return { kind: 'proof_already_used' }
  if (row.proof_key !== q.proofKey) return { kind: 'payment_identifier_conflict' }
  if (row.account_id !== q.accountId) return { kind: 'proof_already_used' }
  return { kind: 'existing' }
}

/** The settlement of one payload (by its proof key) for one account, with its claim's state; null if none. */
export async function readFacilitatorSettlement(
  db: Db,
  q: { accountId: string; proofKey: string },
): Promise<FacilitatorSettlementState | null> {
  const [row] = await db<FacilitatorSettlementState[]>`
    SELECT f.*, c.status AS claim_status, c.settlement_tx AS claim_settlement_tx, c.settlement_error
    FROM facilitator_settlements f JOIN claims c ON c.proof_key = f.proof_key
    WHERE f.proof_key = ${q.proofKey} AND f.account_id = ${q.accountId}`
  return row ?? null
}

/** An account's settlements, newest first, after the one named (cursor pagination). */
export function listFacilitatorSettlements(
  db: Db,
  q: { accountId: string; limit: number; startingAfter: string | null },
): Promise<FacilitatorSettlementState[]> {
  const after =
    q.startingAfter === null
      ? db``
      : db`AND (f.created_at, f.id) < (SELECT created_at, id FROM facilitator_settlements
                                        WHERE id = ${q.startingAfter} AND account_id = ${q.accountId})`
  return db<FacilitatorSettlementState[]>`
    SELECT f.*, c.status AS claim_status, c.settlement_tx AS claim_settlement_tx, c.settlement_error
    FROM facilitator_settlements f JOIN claims c ON c.proof_key = f.proof_key
    WHERE f.account_id = ${q.accountId} ${after}
    ORDER BY f.created_at DESC, f.id DESC LIMIT ${q.limit}`
}

/**
 * The settlements whose claims were just applied (settling → applied, by settleAuthorizations or
 * settleUptoClaims in the same write that marked them settled, in their transaction): each settlement row
 * names its transaction; a treasury settlement books its owner share (to the account's wallet) and fee, as a
 * metered call's; each gets a `facilitator.settled` event. A row already settled is left out: nothing is
 * booked twice.
 */
export async function applyFacilitatorSettlements(
  tx: Tx,
  q: { applied: Array<{ id: string; settlementTx: string | null }> },
): Promise<number> {
  if (q.applied.length === 0) return 0
  const settled = await tx<FacilitatorSettlementRow[]>`
    UPDATE facilitator_settlements f SET settled_at = now(), settlement_tx = a.tx
    FROM unnest(${q.applied.map((a) => a.id)}::text[], ${q.applied.map((a) => a.settlementTx)}::text[]) AS a(id, tx)
    WHERE f.id = a.id AND f.settled_at IS NULL
    RETURNING f.*`
  const booked = settled.filter((s) => s.custody === 'treasury')
  if (booked.length > 0) {
    await tx`
      INSERT INTO ledger_entries (account_id, kind, wallet, amount_atomic, source_type, source_id)
      SELECT f.account_id, 'owner_share', a.wallet_address, f.owner_share_atomic, 'facilitator', f.id
      FROM facilitator_settlements f JOIN accounts a ON a.id = f.account_id
      WHERE f.id = ANY(${booked.map((s) => s.id)}::text[])
      UNION ALL
      SELECT f.account_id, 'fee', NULL, f.fee_atomic, 'facilitator', f.id
      FROM facilitator_settlements f WHERE f.id = ANY(${booked.map((s) => s.id)}::text[])`
  }
  await insertEvents(
    tx,
    settled.map((s) => ({
      accountId: s.account_id,
      type: 'facilitator.settled' as const,
      data: presentFacilitatorSettlement({
        ...s,
        claim_status: 'applied',
        claim_settlement_tx: s.settlement_tx,
        settlement_error: null,
      }),
    })),
  )
  return settled.length
}

/** The API's view of a settlement (GET /api/v1/settlements, the facilitator.settled event). */
export function presentFacilitatorSettlement(s: FacilitatorSettlementState) {
  const status =
    s.settled_at !== null || s.claim_status === 'applied'
      ? 'settled'
      : s.settlement_error !== null
        ? 'failed'
        : 'pending'
  return {
    id: s.id,
    object: 'settlement',
    status,
    custody: s.custody,
    pay_to: s.pay_to,
    payer: s.payer,
    amount_atomic: s.amount_atomic.toString(),
    owner_share_atomic: s.owner_share_atomic.toString(),
    fee_atomic: s.fee_atomic.toString(),
    network: s.network,
    x402_version: s.x402_version,
    payment_identifier: s.payment_identifier,
    transaction: s.settlement_tx ?? s.claim_settlement_tx,
    failure_reason: s.settlement_error,
    created_at: s.created_at.toISOString(),
    settled_at: s.settled_at?.toISOString() ?? null,
  }
}

/**
 * /verify's one read after the chain's, for the /verify requests that arrived together (one statement for
 * the group, control-plane/facilitator-reads.ts): for each, whether its proof is claimed already and, if
 * not, what its payer's unsettled payments hold against its balance read at `block` (payer_reserved: exact
 * authorizations and upto permits, metered or facilitated, on every instance), once per payer and block.
 * Read-only. It waits for the payers' claims in flight (payer_reserved takes each payer's lock, here in
 * hashtext order as every claim statement takes them): 11.8 ms a /verify at 600 settlements/s, but a read
 * without the lock measured no better (x402-facilitator pairs at 600/s: 2-3 % more settlements a second,
 * p50 7-12 % worse, PostgreSQL CPU 5 % higher), so the read stays exact.
 */
export async function readClaimedOrReserved(
  db: Db,
  reads: Array<{ proofKey: string; payer: string; block: bigint }>,
): Promise<Array<{ claimed: true } | { claimed: false; reserved: bigint }>> {
  const doc = JSON.stringify(
    reads.map((q, i) => ({
      i,
      proof_key: q.proofKey,
      payer: q.payer.toLowerCase(),
      block: q.block.toString(),
    })),
  )
  const rows = await db<{ i: number; claimed: boolean; reserved: string | null }[]>`
    WITH req AS MATERIALIZED (
      -- A probe of each proof key's index, never the hashed subplan an EXISTS may be planned as: that reads
      -- every claim (all partitions) once per statement, and a plan made while claims was small (a fresh
      -- deployment, a connection's first statements) kept doing so as it grew (8.6 of a statement's 14.8 ms
      -- at 4,500 claims, auto_explain). The LIMIT keeps the subquery apart: a nested loop over the reads.
      SELECT r.*, k.hit IS NOT NULL AS claimed
      FROM json_to_recordset(${doc}::text::json) AS r(i int, proof_key text, payer text, block bigint)
      LEFT JOIN LATERAL (SELECT 1 AS hit FROM claims c WHERE c.proof_key = r.proof_key LIMIT 1) k ON true
    ),
    held AS MATERIALIZED (
      SELECT payer, block, payer_reserved(payer, block) AS reserved FROM (
        SELECT payer, block FROM req WHERE NOT claimed
        GROUP BY payer, block ORDER BY hashtext(payer), payer, block OFFSET 0
      ) p
    )
    SELECT r.i, r.claimed, h.reserved::text AS reserved
    FROM req r LEFT JOIN held h ON NOT r.claimed AND h.payer = r.payer AND h.block = r.block`
  const out = new Array<{ claimed: true } | { claimed: false; reserved: bigint }>(reads.length)
  for (const r of rows)
    out[r.i] = r.claimed ? { claimed: true } : { claimed: false, reserved: BigInt(r.reserved!) }
  return out
}

/** Whether a proof is claimed already (a metered call, a checkout, a settlement): no use verifying it. */
export async function proofClaimed(db: Db, proofKey: string): Promise<boolean> {
  const rows = await db`SELECT 1 FROM claims WHERE proof_key = ${proofKey} LIMIT 1`
  return rows.length > 0
}

/** The settlements of several payloads (by proof key) with their claims' states: the shared wait's read. */
export function readFacilitatorSettlements(
  db: Db,
  proofKeys: string[],
): Promise<FacilitatorSettlementState[]> {
  return db<FacilitatorSettlementState[]>`
    SELECT f.*, c.status AS claim_status, c.settlement_tx AS claim_settlement_tx, c.settlement_error
    FROM facilitator_settlements f JOIN claims c ON c.proof_key = f.proof_key
    WHERE f.proof_key = ANY(${proofKeys}::text[])`
}
