// x402 batch-settlement vouchers at proxy speed: an instance holds a short lease on each
// channel it serves and accepts that channel's vouchers in memory, with no database round trip per call.
//
// How it stays exact across instances:
// - A lease is taken in one conditional UPDATE (takeChannelLease): one holder per channel at a time, a new
//   epoch per holder, a ceiling = charged + the reservation (at most the balance). Another instance asking
//   marks the channel wanted and retries; the holder lets it go once its calls are written (or when idle).
// - The holder accepts voucher increments charged → charged + price strictly in order, only below its
//   ceiling and only before its local deadline (taken before the UPDATE was sent, minus a margin, so it
//   ends before the database's lease_until does).
// - Every flush interval, one group-committed statement (writeChannelVouchers) persists each channel's
//   highest accepted voucher (cumulative + signature), renews the lease and slides its ceiling, and writes
//   the calls served under it. The epoch fences a holder whose lease was taken over.
//
// What a crash costs, and whose it is: a holder that dies (SIGKILL, power) loses the calls it served whose
// voucher was not yet persisted: at most the reservation (x402.batch_reserve: the holder never accepts past
// the ceiling it was granted at its last write), and in practice one flush interval's worth of calls
// (x402.batch_flush_ms). A voucher is persisted only once its call is written or in the same statement: a
// write made while a call is still upstream marks the channel at the cumulative that call was accepted on,
// not above it (the voucher's signature covers the lower amount). Marked above it, a holder killed before
// that call's row was written left a charged voucher with no call: the claim moved the payer's USDC for a
// call the books never saw (chain ≠ books by one price). The next holder takes the channel once the lease
// ran out (x402.batch_lease_ms) from the last persisted voucher; the payer's client is told the persisted
// cumulative by the scheme's corrective 402 (with that voucher's own signature) and signs on from there.
// Those lost calls were served and are never paid: the loss is the owner's/gateway's, never the payer's — a
// claim only ever submits a voucher the payer signed, and the payer never pays more than the highest
// voucher tollgate persisted.
// (The one call in flight at the crash may be served again if its voucher is retried: also the gateway's.)
import { performance } from 'node:perf_hooks'
import {
  type ChannelLease,
  takeChannelLease,
  type VoucherCall,
  type VoucherMark,
  writeChannelVouchers,
} from '../../books/channels.ts'
import type { Sql } from '../../db/sql.ts'

/** The state of the call paid by the channel's highest accepted voucher. */
type Top = 'flight' | 'captured' | 'released' | 'doubt' | 'open'

/** One channel this instance holds. Opaque to callers: the handle a served call reports back with. */
export interface Lease {
  readonly channelId: string
  epoch: bigint
  /** Highest charged cumulative (memory), and the voucher that covers it: signedMax and its signature
   * (signedMax = charged at a fixed price; above it when a call was charged less than its increment). */
  charged: bigint
  signedMax: bigint
  signature: string | null
  /** Usage pricing: the voucher of the call in flight, whose charge is known only when its answer ends;
   * nothing else is accepted on the channel meanwhile (the next voucher builds on that charge). */
  pending: { max: bigint; signature: string } | null
  ceiling: bigint
  balance: bigint
  claimed: bigint
  /** performance.now() after which nothing more is accepted without renewing. */
  deadlineMs: number
  top: Top
  inFlight: number
  /** The charged cumulative the fixed-price call upstream was accepted on (one call at a time per channel):
   * a mark written meanwhile goes no higher. null: no such call (a usage-priced one moves charged only when
   * it ends). */
  floor: bigint | null
  /** Calls queued for the writer and not yet written. */
  unwritten: number
  lastUseMs: number
  wanted: boolean
  /** Let go at the next write once nothing is in flight (a refund asked for it). */
  releaseNow: boolean
  state: 'live' | 'releasing' | 'gone'
}

/** The channel as the corrective 402 shows it. */
export interface ChannelView {
  channel_id: string
  balance_atomic: bigint
  charged_atomic: bigint
  claimed_atomic: bigint
  signed_max_atomic: bigint
  signature: string | null
}

export type LeaseDecision =
  | { ok: true; lease: Lease }
  | {
      ok: false
      reason: 'not_found' | 'busy' | 'exceeds_balance' | 'in_flight' | 'below' | 'mismatch'
      view?: ChannelView
    }

export interface VoucherLeaseOptions {
  /** This instance's name in lease_holder (unique per process start). */
  holder: string
  leaseMs: number
  flushMs: number
  reserveAtomic: bigint
  /** A lease with no call for this long is let go (another instance may want the channel). */
  idleMs: number
  /** How long a voucher waits for another instance to hand the channel over before answering busy. */
  handoffWaitMs: number
  onWrite?(marks: number, calls: number): void
  onError?(err: unknown): void
  /** Served calls not written (their lease was taken over before their voucher was persisted). */
  onLost?(calls: number): void
}

interface QueuedCall {
  lease: Lease
  row: VoucherCall
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms))

export class VoucherLeases {
  private readonly leases = new Map<string, Lease>()
  private readonly acquiring = new Map<string, Promise<Lease | 'not_found' | 'busy'>>()
  private readonly dirty = new Set<Lease>()
  private calls: QueuedCall[] = []
  private writing: Promise<void> | null = null
  private timer: NodeJS.Timeout | null = null
  private stopped = false
  /** Failed writes in a row: the next one waits flushMs × 2^failures (at most a second). */
  private failures = 0
  private readonly marginMs: number

  constructor(
    private readonly sql: Sql,
    private readonly options: VoucherLeaseOptions,
  ) {
    this.marginMs = Math.max(1, Math.floor(options.leaseMs / 4))
  }

  /**
   * Accepts a verified voucher for cumulative `cumulative` at `price`, once. In the steady state this is
   * synchronous work on a lease already held; a database round trip happens only to take a lease, to renew
   * it (deadline or ceiling reached: once per reservation), or when `refresh` (a deposit just confirmed).
   */
  async accept(q: {
    channelId: string
    cumulative: bigint
    /** The increment the voucher must add: the price, or the ceiling when the charge varies. */
    price: bigint
    signature: string
    refresh?: boolean
    /** The charge is measured after the call (settledFor tells it). */
    varies?: boolean
  }): Promise<LeaseDecision> {
    let refresh = q.refresh === true
    for (let attempt = 0; attempt < 3; attempt++) {
      let lease = this.leases.get(q.channelId)
      if (lease !== undefined && lease.state === 'releasing') {
        await this.writing
        // Its release failed and is retried: held or not is unknown until it lands (see flush).
        if (lease.state === 'releasing') return { ok: false, reason: 'busy' }
        lease = undefined
      }
      if (lease === undefined || lease.state !== 'live') {
        const got = await this.acquire(q.channelId)
        if (got === 'not_found') return { ok: false, reason: 'not_found' }
        if (got === 'busy') return { ok: false, reason: 'busy' }
        lease = got
        refresh = false
      }
      const next = q.cumulative === lease.charged + q.price
      if (refresh || performance.now() >= lease.deadlineMs || (next && q.cumulative > lease.ceiling)) {
        refresh = false
        if (!(await this.renew(lease))) continue
      }
      // A write begun meanwhile may be letting this lease go: accept nothing on it, take it again.
      if (lease.state !== 'live') continue
      return this.decide(lease, q)
    }
    return { ok: false, reason: 'busy' }
  }

  /** The once-only step, synchronous: nothing else runs between the check and the move. */
  private decide(
    lease: Lease,
    q: { cumulative: bigint; price: bigint; signature: string; varies?: boolean },
  ): LeaseDecision {
    const now = performance.now()
    if (lease.balance === 0n) return { ok: false, reason: 'not_found' }
    // One call at a time per channel, as the reference server answers (busy): a call's voucher is then the
    // channel's top when the call ends, so a call the upstream failed (5xx) is taken back and its voucher
    // retried, and no later voucher builds on it. Two at once, a failed call below a later accepted voucher
    // stayed charged with no call: the payer paid for it and the books never saw it (chain ≠ books).
    if (lease.inFlight > 0) return { ok: false, reason: 'in_flight' }
    if (q.cumulative === lease.charged + q.price) {
      if (q.cumulative > lease.balance) return { ok: false, reason: 'exceeds_balance', view: viewOf(lease) }
      // Renewing did not give room (the write failed or the lease is ending): never past the reservation.
      if (q.cumulative > lease.ceiling || now >= lease.deadlineMs) return { ok: false, reason: 'busy' }
      if (q.varies === true) {
        // Charged when the answer ends (settledFor); the top call's state is left as it is until then.
        lease.pending = { max: q.cumulative, signature: q.signature }
        lease.inFlight++
        lease.lastUseMs = now
        return { ok: true, lease }
      }
      const floor = lease.charged
      lease.charged = q.cumulative
      lease.signedMax = q.cumulative
      lease.signature = q.signature
      return this.start(lease, now, floor)
    }
    if (q.cumulative === lease.charged && q.cumulative > 0n) {
      // The same voucher again: a retry of a call that was not served (released, or lost with a crashed
      // holder) is served; one being served or served already is not. Served or in doubt, the payer's
      // client is shown the channel (the scheme's corrective 402): it sent this voucher again because it
      // never saw that call's answer (lost, or the upstream's head never came), and it signs on from the
      // charged cumulative. Refused as a bare replay, the published client sent the same voucher forever.
      if (lease.top === 'released' || lease.top === 'open') {
        if (now >= lease.deadlineMs) return { ok: false, reason: 'busy' }
        return this.start(lease, now, q.cumulative - q.price)
      }
      if (lease.top === 'flight') return { ok: false, reason: 'in_flight' }
      return { ok: false, reason: 'mismatch', view: viewOf(lease) }
    }
    return { ok: false, reason: q.cumulative < lease.charged ? 'below' : 'mismatch', view: viewOf(lease) }
  }

  private start(lease: Lease, now: number, floor: bigint): LeaseDecision {
    lease.top = 'flight'
    lease.inFlight++
    lease.floor = floor
    lease.lastUseMs = now
    this.dirty.add(lease)
    this.schedule()
    return { ok: true, lease }
  }

  /** The call paid by `cumulative` was served: its call row is written with the next flush. */
  served(lease: Lease, cumulative: bigint, row: VoucherCall): void {
    lease.inFlight--
    lease.floor = null
    if (lease.charged === cumulative) lease.top = 'captured'
    this.queue(lease, row)
  }

  /** Not served (the upstream failed, or the client left before forwarding): the voucher may be retried. */
  released(lease: Lease, cumulative: bigint): void {
    lease.inFlight--
    if (lease.pending !== null) {
      // Usage pricing: nothing was charged; the same voucher is the next one again.
      lease.pending = null
      return
    }
    lease.floor = null
    if (lease.charged === cumulative && lease.top === 'flight') lease.top = 'released'
  }

  /**
   * Usage pricing: the call in flight ended, charged `chargeAtomic` (at most its voucher's increment): the
   * channel's charged cumulative moves by the charge, covered by that voucher (signedMax). `row` builds its
   * call at the new cumulative; a call charged nothing writes no call (its key would be the last one's).
   * In doubt (`served` false), the whole increment is charged: it is never served again.
   */
  settledFor(
    lease: Lease,
    chargeAtomic: bigint,
    served: boolean,
    row: (cumulative: bigint) => VoucherCall,
  ): bigint {
    const pending = lease.pending!
    lease.pending = null
    lease.inFlight--
    const charged = served ? lease.charged + chargeAtomic : pending.max
    lease.signedMax = pending.max
    lease.signature = pending.signature
    this.dirty.add(lease)
    if (charged === lease.charged) {
      this.schedule()
      return charged
    }
    lease.charged = charged
    lease.top = served ? 'captured' : 'doubt'
    this.queue(lease, row(charged))
    return charged
  }

  /**
   * A WebSocket session's next voucher: it builds on the voucher in flight (the session's, usage pricing),
   * adding `price`, and stays in flight with it; the session is charged once when it ends (settledFor). Never
   * past the lease's ceiling: what a session holds is not persisted until it ends (a crash loses it, the
   * gateway's loss, as for any voucher accepted and not yet written).
   */
  extend(
    lease: Lease,
    q: { cumulative: bigint; price: bigint; signature: string },
  ): 'ok' | 'busy' | 'exceeds_balance' | 'mismatch' {
    const pending = lease.pending
    if (lease.state !== 'live' || pending === null) return 'busy'
    if (q.cumulative !== pending.max + q.price) return 'mismatch'
    if (q.cumulative > lease.balance) return 'exceeds_balance'
    if (q.cumulative > lease.ceiling || performance.now() >= lease.deadlineMs) return 'busy'
    lease.pending = { max: q.cumulative, signature: q.signature }
    lease.lastUseMs = performance.now()
    return 'ok'
  }

  /** The voucher a session holds in flight: what its next voucher builds on. */
  held(lease: Lease): ChannelView {
    const view = viewOf(lease)
    if (lease.pending === null) return view
    return {
      ...view,
      charged_atomic: lease.pending.max,
      signed_max_atomic: lease.pending.max,
      signature: lease.pending.signature,
    }
  }

  /** Forwarded, outcome unknown (head timeout, client gone mid-call): never served again. */
  doubt(lease: Lease, cumulative: bigint, row: VoucherCall): void {
    lease.inFlight--
    lease.floor = null
    if (lease.charged === cumulative) lease.top = 'doubt'
    this.queue(lease, row)
  }

  private queue(lease: Lease, row: VoucherCall): void {
    lease.unwritten++
    this.calls.push({ lease, row })
    this.schedule()
  }

  /**
   * Writes everything held on the channel and lets its lease go (taking it over from another instance
   * first), so that a refund reads complete books. busy: a call on it is still being served.
   */
  async letGo(channelId: string): Promise<'ok' | 'busy' | 'not_found'> {
    let lease = this.leases.get(channelId)
    if (lease?.state === 'releasing') {
      // Already being let go: done once its write lands (taken anew meanwhile, that write would be fenced).
      await this.flushNow()
      return (lease.state as Lease['state']) === 'gone' ? 'ok' : 'busy'
    }
    if (lease === undefined || lease.state !== 'live') {
      const got = await this.acquire(channelId)
      if (got === 'not_found' || got === 'busy') return got
      lease = got
    }
    if (lease.inFlight > 0) return 'busy'
    lease.releaseNow = true
    await this.flushNow()
    await this.flushNow()
    return lease.state === 'gone' ? 'ok' : 'busy'
  }

  /** Writes what is queued now and waits for it (tests; stop). */
  async flushNow(): Promise<void> {
    while (this.writing !== null) await this.writing
    await this.flush()
  }

  /** SIGTERM: writes every call and lets every lease go, within the deadline. */
  async stop(timeoutMs = 10_000): Promise<void> {
    const deadline = performance.now() + timeoutMs
    for (const lease of this.leases.values()) lease.releaseNow = true
    while ((this.leases.size > 0 || this.calls.length > 0) && performance.now() < deadline) {
      await this.flushNow()
      if (this.leases.size > 0 || this.calls.length > 0) await sleep(this.options.flushMs)
    }
    this.stopped = true
    if (this.timer) clearTimeout(this.timer)
  }

  private acquire(channelId: string): Promise<Lease | 'not_found' | 'busy'> {
    let p = this.acquiring.get(channelId)
    if (p === undefined) {
      p = this.take(channelId).finally(() => this.acquiring.delete(channelId))
      this.acquiring.set(channelId, p)
    }
    return p
  }

  private async take(channelId: string): Promise<Lease | 'not_found' | 'busy'> {
    const { holder, leaseMs, reserveAtomic, handoffWaitMs } = this.options
    const giveUpAt = performance.now() + handoffWaitMs
    let waitMs = 5
    for (;;) {
      const sentAt = performance.now()
      const row = await takeChannelLease(this.sql, {
        channelId,
        holder,
        ttlMs: leaseMs,
        reserve: reserveAtomic,
      })
      if (row === null) return 'not_found'
      if (row.won) {
        const lease = leaseFrom(row, sentAt + leaseMs - this.marginMs)
        this.leases.set(channelId, lease)
        this.schedule()
        return lease
      }
      // Held elsewhere (now marked wanted): its holder writes its calls and lets go within a flush or two,
      // or its lease runs out if it died.
      if (performance.now() + waitMs > giveUpAt) return 'busy'
      await sleep(waitMs)
      waitMs = Math.min(waitMs * 2, 50)
    }
  }

  /** Persists the lease's top voucher now and extends it; false when the lease was taken over. */
  private async renew(lease: Lease): Promise<boolean> {
    this.dirty.add(lease)
    await this.flushNow()
    return lease.state === 'live' && performance.now() < lease.deadlineMs
  }

  private schedule(): void {
    if (this.timer !== null || this.stopped) return
    const delayMs = Math.min(1_000, this.options.flushMs * 2 ** this.failures)
    this.timer = setTimeout(() => {
      this.timer = null
      void this.flush().finally(() => {
        if (this.leases.size > 0 || this.calls.length > 0) this.schedule()
      })
    }, delayMs)
    this.timer.unref()
  }

  private flush(): Promise<void> {
    if (this.writing !== null) return this.writing
    const now = performance.now()
    const marks: VoucherMark[] = []
    const marked: Lease[] = []
    const calls = this.calls.splice(0)
    const inThisWrite = new Map<Lease, number>()
    for (const c of calls) inThisWrite.set(c.lease, (inThisWrite.get(c.lease) ?? 0) + 1)
    for (const lease of this.leases.values()) {
      if (lease.state === 'releasing') {
        // A release whose write failed: the same mark again (its calls are back in the queue).
        marks.push(markOf(lease, true))
        marked.push(lease)
        continue
      }
      if (lease.state !== 'live') continue
      const idle = now - lease.lastUseMs >= this.options.idleMs
      // Let go only when every call served under it is written by this very statement (after the mark) or
      // was written before: the next holder then finds the books complete.
      const release =
        (lease.wanted || idle || lease.releaseNow) &&
        lease.inFlight === 0 &&
        lease.unwritten === (inThisWrite.get(lease) ?? 0)
      // A call still upstream keeps its lease alive: nobody else may take the channel under it.
      const renew = lease.inFlight > 0 && now >= lease.deadlineMs - this.options.leaseMs / 2
      if (!release && !renew && !this.dirty.has(lease)) continue
      if (release) lease.state = 'releasing'
      marks.push(markOf(lease, release))
      marked.push(lease)
    }
    if (marks.length === 0 && calls.length === 0) return Promise.resolve()
    const sentAt = now
    const write = writeChannelVouchers(this.sql, {
      holder: this.options.holder,
      ttlMs: this.options.leaseMs,
      reserve: this.options.reserveAtomic,
      marks,
      calls: calls.map((c) => c.row),
    }).then(
      (result) => {
        this.failures = 0
        this.options.onWrite?.(marks.length, calls.length)
        const applied = new Map(result.marked.map((m) => [m.channel_id, m]))
        for (let i = 0; i < marked.length; i++) {
          const lease = marked[i]!
          const row = applied.get(lease.channelId)
          if (lease.charged === marks[i]!.cumulative) this.dirty.delete(lease)
          if (row === undefined || marks[i]!.release) {
            // Let go, or fenced (taken over): whatever it accepts from now on must come from a new lease.
            this.forget(lease)
            continue
          }
          lease.ceiling = row.lease_ceiling_atomic
          lease.balance = row.balance_atomic
          lease.claimed = row.claimed_atomic
          lease.wanted = row.lease_wanted
          lease.deadlineMs = sentAt + this.options.leaseMs - this.marginMs
        }
        let lost = 0
        for (const c of calls) {
          c.lease.unwritten--
          if (!result.written.has(`batch:${c.row.channelId}:${c.row.cumulative}`)) lost++
        }
        if (lost > 0) this.options.onLost?.(lost)
      },
      (err) => {
        // Nothing was written, or all of it (a commit whose answer was lost with the connection, as a
        // database restart does): the calls go back to the front, the marks stay dirty. A lease being let go
        // stays 'releasing' and accepts nothing: if the release did commit, another instance may hold the
        // channel already, and a voucher accepted here would be served and then fenced (never paid). Its
        // write is retried as it was, which is idempotent either way.
        this.calls.unshift(...calls)
        this.failures = Math.min(this.failures + 1, 10)
        this.options.onError?.(err)
      },
    )
    this.writing = write.finally(() => {
      this.writing = null
    })
    return this.writing
  }

  private forget(lease: Lease): void {
    lease.state = 'gone'
    this.dirty.delete(lease)
    if (this.leases.get(lease.channelId) === lease) this.leases.delete(lease.channelId)
  }
}

function leaseFrom(row: ChannelLease, deadlineMs: number): Lease {
  return {
    channelId: row.channel_id,
    epoch: row.lease_epoch,
    charged: row.charged_atomic,
    signedMax: row.signed_max_atomic,
    signature: row.signature,
    pending: null,
    ceiling: row.lease_ceiling_atomic,
    balance: row.balance_atomic,
    claimed: row.claimed_atomic,
    deadlineMs,
    top: row.top_open ? 'open' : 'captured',
    inFlight: 0,
    floor: null,
    unwritten: 0,
    lastUseMs: performance.now(),
    wanted: false,
    releaseNow: false,
    state: 'live',
  }
}

function markOf(lease: Lease, release: boolean): VoucherMark {
  return {
    channelId: lease.channelId,
    epoch: lease.epoch,
    // Not above the call upstream: its row is not written yet.
    cumulative: lease.floor ?? lease.charged,
    signedMax: lease.signedMax,
    signature: lease.signature ?? '',
    release,
  }
}

function viewOf(lease: Lease): ChannelView {
  return {
    channel_id: lease.channelId,
    balance_atomic: lease.balance,
    charged_atomic: lease.charged,
    claimed_atomic: lease.claimed,
    // The highest accepted voucher is the one shown: its own signature covers the charged cumulative.
    signed_max_atomic: lease.signedMax,
    signature: lease.signature,
  }
}
