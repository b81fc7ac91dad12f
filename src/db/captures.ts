// Captures: a served metered call becomes one `calls` row and its ledger entries (owner share + fee), and
// its claim turns 'captured', all in one statement (one implicit transaction) per batch of calls.
// A capture lost in a crash before its flush leaves the claim uncaptured: it is refunded after the retry
// window. Money is never lost; at worst a served call is given back.
import type { BatchWriterOptions } from './claims.ts'
import type { Sql } from './sql.ts'

export interface Capture {
  callId: string
  proofKey: string
  endpointId: string
  accountId: string
  ownerWallet: string
  payer: string
  amountAtomic: bigint
  ownerShareAtomic: bigint
  feeAtomic: bigint
  upstreamStatus: number
  method: string
}

export class CaptureWriter {
  private queue: Capture[] = []
  private inFlight = 0
  private idle: Array<() => void> = []
  private scheduled = false

  constructor(
    private readonly sql: Sql,
    private readonly options: BatchWriterOptions & {
      onError(err: unknown, lost: number): void
      /** How long captures gather before a write: fewer, larger transactions under load. */
      flushIntervalMs: number
    },
  ) {}

  /** Fire and forget: the caller already has its answer; the write follows in the next batch. */
  add(capture: Capture): void {
    this.queue.push(capture)
    if (this.queue.length >= this.options.batchMax && this.inFlight < this.options.concurrency)
      return this.flush()
    if (this.inFlight < this.options.concurrency && !this.scheduled) {
      // Let the captures of the next few milliseconds join the same batch.
      this.scheduled = true
      setTimeout(() => {
        this.scheduled = false
        this.flush()
      }, this.options.flushIntervalMs).unref()
    }
  }

  /** Resolves when everything queued so far is written (SIGTERM drains through this). */
  async drain(): Promise<void> {
    while (this.queue.length > 0 || this.inFlight > 0) {
      if (this.inFlight === 0) this.flush()
      await new Promise<void>((r) => this.idle.push(r))
    }
  }

  private flush(): void {
    if (this.queue.length === 0) return
    const batch = this.queue.splice(0, this.options.batchMax)
    this.inFlight++
    this.options.onBatch?.(batch.length)
    writeCaptures(this.sql, batch)
      .catch((err) => this.options.onError(err, batch.length))
      .finally(() => {
        this.inFlight--
        if (this.queue.length > 0) this.flush()
        for (const wake of this.idle.splice(0)) wake()
      })
  }
}

export async function writeCaptures(sql: Sql, batch: Capture[]): Promise<number> {
  const col = <K extends keyof Capture>(k: K) =>
    batch.map((c) => (typeof c[k] === 'bigint' ? c[k].toString() : c[k]))
  const [row] = await sql<{ n: number }[]>`
    WITH input AS (
      SELECT * FROM unnest(${col('callId')}::text[], ${col('proofKey')}::text[], ${col('endpointId')}::text[],
                           ${col('accountId')}::text[], ${col('ownerWallet')}::text[], ${col('payer')}::text[],
                           ${col('amountAtomic')}::bigint[], ${col('ownerShareAtomic')}::bigint[],
                           ${col('feeAtomic')}::bigint[], ${col('upstreamStatus')}::int[], ${col('method')}::text[])
        AS t(call_id, proof_key, endpoint_id, account_id, owner_wallet, payer, amount, owner_share, fee, status, method)
    ),
    captured AS (
      UPDATE claims c SET status = 'captured', captured_at = now(), lease_until = NULL
      FROM input i WHERE c.proof_key = i.proof_key AND c.status = 'claimed'
      RETURNING c.proof_key
    ),
    new_calls AS (
      INSERT INTO calls (id, proof_key, endpoint_id, account_id, payer, amount_atomic, owner_share_atomic,
                         fee_atomic, upstream_status, method)
      SELECT i.call_id, i.proof_key, i.endpoint_id, i.account_id, i.payer, i.amount, i.owner_share, i.fee,
             i.status, i.method
      FROM input i JOIN captured USING (proof_key)
      RETURNING id
    ),
    entries AS (
      INSERT INTO ledger_entries (account_id, kind, wallet, amount_atomic, source_type, source_id)
      SELECT i.account_id, 'owner_share', i.owner_wallet, i.owner_share, 'call', i.call_id
        FROM input i JOIN captured USING (proof_key)
      UNION ALL
      SELECT i.account_id, 'fee', NULL, i.fee, 'call', i.call_id
        FROM input i JOIN captured USING (proof_key)
      RETURNING 1
    )
    SELECT (SELECT count(*) FROM new_calls)::int AS n, (SELECT count(*) FROM entries)::int AS e`
  return row?.n ?? 0
}
