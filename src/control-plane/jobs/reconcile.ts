// Reconciliation: the chain against the books for a time range, to the base unit.
//   inflow:  USDC received by the treasury in the proofs claimed in the range
//            = captured calls + applied payments (and facilitator settlements to the treasury) + refunds booked
//              + uncaptured (still in their retry window)
//   outflow: USDC the treasury sent = confirmed payout rows (same hash, recipient and amount)
//   split:   owner shares + fees = captured, for the calls captured in the range
//   batches: each capture batch's owner share and fee entries = the sums of the calls that name the batch,
//            per account, to the base unit
//   entries: confirmed payouts = the ledger entries linked to them
//   claims:  one call per captured claim and none for uncaptured ones; no claim re-won without a release;
//            refunds only for claims never captured; revenue booked for every due call and none before it
//   refunds: each merchant refund = its entries (payer's part, debit, fee given back), in a payout of its
//            status, never more than its payment or call booked
//   balances: the running balances (per account, per wallet) = the sums of their ledger entries
// Any difference makes the report not ok (the CLI exits non-zero, the admin route answers 409).
import { getAddress, type Hash } from 'viem'
import { archivedThrough } from '../../books/archive.ts'
import type { ChainContext } from '../../chain/connect.ts'
import { type ChainTransfer, scanTransfers } from '../../chain/transfer-logs.ts'
import type { Config } from '../../config/schema.ts'
import type { Sql } from '../../db/sql.ts'
import { type BalancesCheck, type BalancesScope, checkBalances } from './reconcile-balances.ts'
import { type BatchesCheck, checkBatches } from './reconcile-batches.ts'
import { type ClaimsCheck, checkClaims } from './reconcile-claims.ts'
import { checkPasses, type PassesCheck } from './reconcile-passes.ts'
import { checkRefunds, type RefundsCheck } from './reconcile-refunds.ts'

export interface ReconcileDeps {
  sql: Sql
  chain: Pick<ChainContext, 'publicClient' | 'treasury' | 'usdc'>
  config: Config
}

/** Unbounded ends (null) mean from genesis / until now. */
export interface ReconcileRange {
  fromMs?: number | null
  toMs?: number | null
  /**
   * Which running balances to check: null = all of them (a scan of the ledger); a scope = those changed
   * since; false = none (the checkpointed run checks them against its snapshots itself). Default: all for
   * an unbounded run, those changed since `fromMs` for a ranged one.
   */
  balances?: BalancesScope | null | false
}

type Atomic = string

export interface ReconcileReport {
  ok: boolean
  treasury: string
  token: string
  range: { from: string | null; to: string | null; from_block: string; to_block: string }
  inflow: {
    claims: number
    chain_proof_transfers_atomic: Atomic
    captured_calls_atomic: Atomic
    applied_payments_atomic: Atomic
    refunds_atomic: Atomic
    uncaptured_in_window_atomic: Atomic
    books_atomic: Atomic
    difference_atomic: Atomic
    claims_missing_on_chain: number
    unsettled_authorizations: number
    /** Served x402 calls whose authorization can no longer be collected (expired, reverted): nothing is
     * booked for them and no money is expected; a batch's failed items share its hash with its paid ones. */
    failed_authorizations: number
    /** Claims whose settlement was mined after the chain was read (booked between the chain read and the
     * books read): left out of both sides, the next run counts them. Not a difference. */
    settled_after_read: number
    /** Transfers to the treasury that no proof claimed (top-ups, proofs not presented yet): not a difference. */
    unclaimed_transfers: number
    unclaimed_inflow_atomic: Atomic
  }
  outflow: {
    chain_transfers: number
    chain_transfers_atomic: Atomic
    confirmed_payouts_atomic: Atomic
    /** Mined but not marked yet (a run in progress, or a crash the next run resolves): not a difference. */
    in_flight_payouts_atomic: Atomic
    unknown_outflow_atomic: Atomic
    difference_atomic: Atomic
  }
  split: {
    calls: number
    captured_atomic: Atomic
    owner_shares_atomic: Atomic
    fees_atomic: Atomic
    difference_atomic: Atomic
  }
  payout_entries: {
    confirmed_payouts: number
    confirmed_payouts_atomic: Atomic
    linked_entries_atomic: Atomic
    difference_atomic: Atomic
  }
  /** Capture batches: each batch's entries against the calls it booked (migration 0050). */
  batches: BatchesCheck
  /** Claims against calls, refunds and revenue, by the transition table (src/books/transitions.ts). */
  claims: ClaimsCheck
  /** Merchants' refunds against their entries, their payouts and what their payments or calls booked. */
  refunds: RefundsCheck
  /** Passes against their purchases and their draws. */
  passes: PassesCheck
  balances: BalancesCheck
  /** Set by a checkpointed run (`npm run reconcile`): what it covered and whether it moved the checkpoint. */
  checkpoint?: { mode: 'full' | 'incremental'; since: string | null; saved: boolean }
  differences: string[]
}

interface Bounds {
  from: Date
  to: Date
  fromBlock: bigint
  toBlock: bigint
  /** The last block whose transfers were read: the chain as it was when the books were read after it. */
  scannedBlock: bigint
}

export async function reconcile(deps: ReconcileDeps, range: ReconcileRange = {}): Promise<ReconcileReport> {
  const { sql, chain, config } = deps
  const client = chain.publicClient
  const fromMs = range.fromMs ?? null
  const toMs = range.toMs ?? null
  const from = fromMs === null ? new Date(0) : new Date(fromMs)
  const to = toMs === null ? new Date('9999-01-01T00:00:00Z') : new Date(toMs)

  const latest = await client.getBlockNumber({ cacheTime: 0 })
  const fromBlock = fromMs === null ? 0n : await firstBlockAtOrAfter(client, fromMs, latest)
  // A proof may be up to max_proof_age_ms older than its claim: scan that far back for the inflows.
  const inflowFromBlock =
    fromMs === null ? 0n : await firstBlockAtOrAfter(client, fromMs - config.chain.max_proof_age_ms, latest)
  const toBlock = toMs === null ? latest : await lastBlockBefore(client, toMs, latest)
  const bounds: Bounds = { from, to, fromBlock, toBlock, scannedBlock: latest }

  const chunk = BigInt(config.payouts.reconcile_block_chunk)
  const [inflows, outflows] = await Promise.all([
    scanTransfers(client, {
      usdc: chain.usdc.address,
      to: chain.treasury,
      fromBlock: inflowFromBlock,
      toBlock: latest,
      chunk,
    }),
    scanTransfers(client, {
      usdc: chain.usdc.address,
      from: chain.treasury,
      fromBlock,
      toBlock: latest,
      chunk,
    }),
  ])

  const inflow = await checkInflow(deps, sumByHash(inflows), bounds)
  const outflow = await checkOutflow(deps, sumByHash(outflows), bounds)
  const split = await checkSplit(sql, bounds)
  const linked = await checkLinkedEntries(sql, bounds)
  // Claims, refunds and passes are checked against their calls and entries: those of archived months left
  // the database (their sums stay in archived_ledger_sums, counted by the balances), so these start after.
  const kept = await archivedThrough(sql)
  const keptFrom = kept !== null && kept > from ? kept : from
  const claims = await checkClaims(sql, { from: keptFrom, to })
  const batches = await checkBatches(sql, { from: keptFrom, to })
  const refunds = await checkRefunds(sql, { from: keptFrom, to })
  const passes = await checkPasses(sql, { from: keptFrom, to })
  const balances =
    range.balances === false
      ? NO_BALANCES
      : await checkBalances(
          sql,
          range.balances !== undefined ? range.balances : fromMs === null ? null : { since: from },
        )
  const differences = [
    ...inflow.differences,
    ...outflow.differences,
    ...split.differences,
    ...linked.differences,
    ...batches.differences,
    ...claims.differences,
    ...refunds.differences,
    ...passes.differences,
    ...balances.differences,
  ]

  return {
    ok: differences.length === 0,
    treasury: chain.treasury,
    token: chain.usdc.address,
    range: {
      from: fromMs === null ? null : from.toISOString(),
      to: toMs === null ? null : to.toISOString(),
      from_block: fromBlock.toString(),
      to_block: toBlock.toString(),
    },
    inflow: inflow.section,
    outflow: outflow.section,
    split: split.section,
    payout_entries: linked.section,
    batches,
    claims,
    refunds,
    passes,
    balances,
    differences,
  }
}

const NO_BALANCES: BalancesCheck = {
  accounts_checked: 0,
  wallets_checked: 0,
  drifted_accounts: 0,
  drifted_wallets: 0,
  differences: [],
}

interface Checked<T> {
  section: T
  differences: string[]
}

/** Claims of the range against the chain: every proof's transfer, and where its money went in the books. */
async function checkInflow(
  deps: ReconcileDeps,
  inByHash: Map<string, ChainTransfer>,
  b: Bounds,
): Promise<Checked<ReconcileReport['inflow']>> {
  const { sql } = deps
  const differences: string[] = []
  const claims = await sql<
    {
      proof_key: string
      kind: 'tx' | 'eip3009'
      status: string
      amount_atomic: bigint
      settlement_tx: string | null
      settlement_error: string | null
      call_amount: bigint | null
      refund_amount: bigint
    }[]
  >`
    SELECT c.proof_key, c.kind, c.status, c.amount_atomic, c.settlement_tx, c.settlement_error,
           -- A prepaid ceiling's unused part is refunded from the call: charge + that refund = what came in.
           (SELECT k.amount_atomic + k.refund_atomic FROM calls k WHERE k.id = c.call_id) AS call_amount,
           (SELECT coalesce(sum(e.amount_atomic), 0) FROM ledger_entries e
             WHERE e.kind = 'refund' AND e.source_type = 'claim' AND e.source_id = c.proof_key)::bigint AS refund_amount
    FROM claims c
    WHERE c.claimed_at >= ${b.from} AND c.claimed_at < ${b.to}
      -- A facilitator settlement paid to the merchant's own wallet never reaches the treasury (migration 0065).
      AND NOT (c.target_type = 'facilitator' AND EXISTS (
        SELECT 1 FROM facilitator_settlements f WHERE f.id = c.target_id AND f.custody = 'merchant'))`
  // Each claim's transaction: its proof's own for a transaction hash, its settlement's for an authorization.
  const hashOf = (c: (typeof claims)[number]) =>
    c.kind === 'tx' ? c.proof_key.slice(3).toLowerCase() : c.settlement_tx?.toLowerCase()
  const notScanned = new Set<string>()
  for (const c of claims) {
    const hash = c.settlement_error === null ? hashOf(c) : undefined
    if (hash && !inByHash.has(hash)) notScanned.add(hash)
  }
  const afterRead = await minedAfterRead(deps, notScanned, b)
  let captured = 0n
  let applied = 0n
  let refunds = 0n
  let uncaptured = 0n
  let unsettled = 0
  let failed = 0
  let missing = 0
  let settledAfterRead = 0
  const claimedHashes = new Set<string>()
  for (const c of claims) {
    if (c.settlement_error !== null) {
      failed++
      continue
    }
    const hash = hashOf(c)
    if (!hash) {
      unsettled++
      continue
    }
    if (afterRead.has(hash)) {
      settledAfterRead++
      continue
    }
    if (!claimedHashes.has(hash)) {
      claimedHashes.add(hash)
      if (!inByHash.has(hash)) {
        missing++
        differences.push(`claim ${c.proof_key}: no USDC transfer to the treasury in transaction ${hash}`)
      }
    }
    // (A captured claim without its call is reported by the claims check.)
    if (c.status === 'captured') captured += c.call_amount ?? 0n
    else if (c.status === 'applied') applied += c.amount_atomic
    else if (c.status === 'refund_due' || c.status === 'refunded') refunds += c.refund_amount
    // A checkout authorization sent but not resolved yet (the batcher applies it when it sees the receipt).
    else if (c.status === 'claimed' || c.status === 'settling') uncaptured += c.amount_atomic
  }
  differences.push(...settlementProofs(claims, hashOf))
  let chainProof = 0n
  for (const h of claimedHashes) chainProof += inByHash.get(h)?.value ?? 0n
  const inBooks = captured + applied + refunds + uncaptured
  if (chainProof !== inBooks) {
    differences.push(`inflow: chain ${chainProof} ≠ books ${inBooks} (difference ${chainProof - inBooks})`)
  }
  const unclaimed = await unclaimedTransfers(sql, inByHash, b)
  return {
    section: {
      claims: claims.length,
      chain_proof_transfers_atomic: chainProof.toString(),
      captured_calls_atomic: captured.toString(),
      applied_payments_atomic: applied.toString(),
      refunds_atomic: refunds.toString(),
      uncaptured_in_window_atomic: uncaptured.toString(),
      books_atomic: inBooks.toString(),
      difference_atomic: (chainProof - inBooks).toString(),
      claims_missing_on_chain: missing,
      unsettled_authorizations: unsettled,
      failed_authorizations: failed,
      settled_after_read: settledAfterRead,
      unclaimed_transfers: unclaimed.length,
      unclaimed_inflow_atomic: unclaimed.reduce((s, t) => s + t.value, 0n).toString(),
    },
    differences,
  }
}

/**
 * A transaction-hash proof of a transaction that settled other claims (one of tollgate's own settlements, or
 * an authorization its payer or anyone submitted before tollgate did): the same money booked twice (the
 * settled claims' and the proof's). The verifier refuses both (own_settlement, authorization_transfer); this
 * names one accepted before it did, beside the inflow difference it makes.
 */
function settlementProofs<C extends { proof_key: string; kind: string }>(
  claims: C[],
  hashOf: (c: C) => string | undefined,
): string[] {
  const settlements = new Set(claims.flatMap((c) => (c.kind === 'tx' ? [] : [hashOf(c)])))
  return claims
    .filter((c) => c.kind === 'tx' && settlements.has(hashOf(c)))
    .map((c) => `claim ${c.proof_key}: a transaction-hash proof of a transaction that settled other claims`)
}

/**
 * Of the claimed transactions the scan did not find, those mined after the scanned blocks: the chain is read
 * first and the books after it, so a settlement booked in between names a block the scan never read. Its
 * receipt says so; any other (mined in the scanned blocks without a transfer, reverted, unknown) stays a
 * difference. None of this costs a request when every claimed transaction was found.
 */
async function minedAfterRead(deps: ReconcileDeps, hashes: Set<string>, b: Bounds): Promise<Set<string>> {
  const after = new Set<string>()
  for (const hash of hashes) {
    const receipt = await deps.chain.publicClient
      .getTransactionReceipt({ hash: hash as Hash })
      .catch(() => null)
    if (receipt?.status === 'success' && receipt.blockNumber > b.scannedBlock) after.add(hash)
  }
  return after
}

/** Transfers in the range that no claim (of any time) names: top-ups, proofs not presented yet. */
async function unclaimedTransfers(
  sql: Sql,
  inByHash: Map<string, ChainTransfer>,
  b: Bounds,
): Promise<ChainTransfer[]> {
  const rangeInflows = [...inByHash.values()].filter(
    (t) => t.blockNumber >= b.fromBlock && t.blockNumber <= b.toBlock,
  )
  if (rangeInflows.length === 0) return []
  const knownRows = await sql<{ hash: string }[]>`
    SELECT lower(substr(proof_key, 4)) AS hash FROM claims
    WHERE proof_key = ANY(${rangeInflows.map((t) => `tx:${t.hash}`)}::text[])
    UNION
    -- One index probe per hash (claims_settlement_tx_lower; IS NOT NULL is its predicate, which the planner
    -- cannot infer). As lower(settlement_tx) = ANY(hashes) this was a scan of every claim: 16 s at 25 M in
    -- the history bench, and still a scan with the predicate named once the array held 4,000 hashes.
    SELECT lower(c.settlement_tx) FROM unnest(${rangeInflows.map((t) => t.hash)}::text[]) AS h(hash)
    JOIN claims c ON c.settlement_tx IS NOT NULL AND lower(c.settlement_tx) = h.hash`
  const known = new Set(knownRows.map((r) => r.hash))
  return rangeInflows.filter((t) => !known.has(t.hash))
}

/** Chain transfers from the treasury against payout rows (same hash, recipient and amount). */
async function checkOutflow(
  deps: ReconcileDeps,
  outByHash: Map<string, ChainTransfer>,
  b: Bounds,
): Promise<Checked<ReconcileReport['outflow']>> {
  const { sql, chain } = deps
  const differences: string[] = []
  const payouts = await sql<
    {
      id: string
      wallet: string
      amount_atomic: bigint
      status: string
      tx_hash: string
      previous_tx_hashes: string[]
      confirmed_at: Date | null
    }[]
  >`
    SELECT id, wallet, amount_atomic, status, lower(tx_hash) AS tx_hash, previous_tx_hashes, confirmed_at
    FROM payouts
    WHERE lower(treasury) = ${chain.treasury.toLowerCase()}
      AND (lower(tx_hash) = ANY(${[...outByHash.keys()]}::text[])
           OR (status = 'confirmed' AND confirmed_at >= ${b.from} AND confirmed_at < ${b.to}))`
  const payoutByHash = new Map(payouts.map((p) => [p.tx_hash, p]))
  let chainOut = 0n
  let confirmedOut = 0n
  let inFlight = 0n
  let unknownOut = 0n
  for (const [hash, t] of outByHash) {
    chainOut += t.value
    const p = payoutByHash.get(hash)
    if (!p) {
      unknownOut += t.value
      differences.push(`outflow ${hash}: ${t.value} to ${t.to} matches no payout`)
    } else if (p.status === 'confirmed') {
      confirmedOut += t.value
      if (p.amount_atomic !== t.value || getAddress(p.wallet) !== getAddress(t.to)) {
        differences.push(
          `payout ${p.id}: books ${p.amount_atomic} to ${p.wallet}, chain ${t.value} to ${t.to}`,
        )
      }
    } else if (p.status === 'pending' || p.status === 'submitted') {
      inFlight += t.value
    } else {
      differences.push(`payout ${p.id} is ${p.status} but its transaction ${hash} moved ${t.value}`)
    }
  }
  for (const p of payouts) {
    if (p.status === 'confirmed' && !outByHash.has(p.tx_hash) && p.confirmed_at && p.confirmed_at >= b.from) {
      // Mined before the scanned blocks, or after them (confirmed by the batcher between the chain read
      // and the books read: the next run sees its transfer)? Ask for its receipt before calling it a
      // difference.
      const receipt = await chain.publicClient
        .getTransactionReceipt({ hash: p.tx_hash as Hash })
        .catch(() => null)
      const scanned =
        receipt !== null && receipt.blockNumber >= b.fromBlock && receipt.blockNumber <= b.scannedBlock
      if (receipt?.status !== 'success' || scanned) {
        differences.push(`payout ${p.id} is confirmed but no transfer ${p.tx_hash} is on chain`)
      }
    }
  }
  return {
    section: {
      chain_transfers: outByHash.size,
      chain_transfers_atomic: chainOut.toString(),
      confirmed_payouts_atomic: confirmedOut.toString(),
      in_flight_payouts_atomic: inFlight.toString(),
      unknown_outflow_atomic: unknownOut.toString(),
      difference_atomic: (chainOut - confirmedOut - inFlight).toString(),
    },
    differences,
  }
}

/**
 * Owner shares + fees = captured, for the calls of the range whose revenue is due: every transaction-hash
 * call, and an x402 call once its settlement is confirmed (before that it is not revenue: it may never be paid).
 * A call booked by a capture batch counts its own owner share and fee (the batches check holds each batch's
 * entries to the sum of its calls); any other call, the entries of its own.
 */
async function checkSplit(sql: Sql, b: Bounds): Promise<Checked<ReconcileReport['split']>> {
  const [split] = await sql<{ calls: number; captured: bigint; owner: bigint; fee: bigint }[]>`
    SELECT count(*)::int AS calls, coalesce(sum(c.amount_atomic), 0)::bigint AS captured,
           coalesce(sum(s.owner), 0)::bigint AS owner, coalesce(sum(s.fee), 0)::bigint AS fee
    FROM calls c
    JOIN claims k ON k.proof_key = call_proof_key(c.proof_key, c.proof) AND (k.kind = 'tx' OR k.settled_at IS NOT NULL)
    LEFT JOIN LATERAL (
      SELECT sum(x.amount) FILTER (WHERE x.kind = 'owner_share') AS owner,
             sum(x.amount) FILTER (WHERE x.kind = 'fee') AS fee
      FROM (SELECT e.kind, e.amount_atomic AS amount FROM ledger_entries e
            WHERE e.source_type = 'call' AND e.source_id = c.id AND e.kind IN ('owner_share', 'fee')
            UNION ALL
            SELECT v.kind, v.amount FROM (VALUES ('owner_share', c.owner_share_atomic), ('fee', c.fee_atomic))
              AS v(kind, amount)
            WHERE c.ledger_batch_id IS NOT NULL) x
    ) s ON true
    WHERE c.created_at >= ${b.from} AND c.created_at < ${b.to}`
  const difference = split!.captured - split!.owner - split!.fee
  return {
    section: {
      calls: split!.calls,
      captured_atomic: split!.captured.toString(),
      owner_shares_atomic: split!.owner.toString(),
      fees_atomic: split!.fee.toString(),
      difference_atomic: difference.toString(),
    },
    differences:
      difference === 0n
        ? []
        : [`split: captured ${split!.captured} ≠ owner shares ${split!.owner} + fees ${split!.fee}`],
  }
}

/** Confirmed payouts of the range = the ledger entries linked to them. */
async function checkLinkedEntries(sql: Sql, b: Bounds): Promise<Checked<ReconcileReport['payout_entries']>> {
  const [linked] = await sql<{ n: number; payouts: bigint; entries: bigint }[]>`
    SELECT count(*)::int AS n, coalesce(sum(p.amount_atomic), 0)::bigint AS payouts,
           coalesce(sum((SELECT sum(e.amount_atomic) FROM ledger_entries e WHERE e.payout_id = p.id)), 0)::bigint
             -- Entries of an archived month are there as sums per payout.
             + coalesce(sum((SELECT sum(a.amount_atomic) FROM archived_ledger_sums a WHERE a.payout_id = p.id)), 0)::bigint
             AS entries
    FROM payouts p
    WHERE p.status = 'confirmed' AND p.confirmed_at >= ${b.from} AND p.confirmed_at < ${b.to}`
  const difference = linked!.payouts - linked!.entries
  return {
    section: {
      confirmed_payouts: linked!.n,
      confirmed_payouts_atomic: linked!.payouts.toString(),
      linked_entries_atomic: linked!.entries.toString(),
      difference_atomic: difference.toString(),
    },
    differences:
      difference === 0n
        ? []
        : [`confirmed payouts ${linked!.payouts} ≠ their linked entries ${linked!.entries}`],
  }
}

type Client = ReconcileDeps['chain']['publicClient']

/** Per transaction: the sum of its transfers (a settlement may carry several), first recipient, block. */
function sumByHash(transfers: ChainTransfer[]): Map<string, ChainTransfer> {
  const m = new Map<string, ChainTransfer>()
  for (const t of transfers) {
    const key = t.hash.toLowerCase()
    const prev = m.get(key)
    m.set(key, prev ? { ...prev, value: prev.value + t.value } : { ...t, hash: key as Hash })
  }
  return m
}

async function blockTimeMs(client: Client, n: bigint): Promise<number> {
  const block = await client.getBlock({ blockNumber: n })
  return Number(block.timestamp) * 1000
}

/** Binary search: the first block whose timestamp is ≥ ms (latest + 1 if none). */
async function firstBlockAtOrAfter(client: Client, ms: number, latest: bigint): Promise<bigint> {
  let lo = 0n
  let hi = latest + 1n
  while (lo < hi) {
    const mid = (lo + hi) / 2n
    if ((await blockTimeMs(client, mid)) >= ms) hi = mid
    else lo = mid + 1n
  }
  return lo
}

/** The last block whose timestamp is < ms. */
async function lastBlockBefore(client: Client, ms: number, latest: bigint): Promise<bigint> {
  const first = await firstBlockAtOrAfter(client, ms, latest)
  return first > 0n ? first - 1n : 0n
}
