// Counts what paid calls did (served or not, upstream latency, who paid) in memory per endpoint (and per MCP
// tool) per hour, and adds the counts to the database every few seconds: the hot path does a map look-up and
// a few increments (twice for an MCP tool), the listing reads hourly rows. A crash loses at most one
// interval of counts (figures shown to buyers, not money: the books are elsewhere).
import {
  type AgentDelta,
  addObserved,
  type Delivered,
  type HourlyDelta,
  type PayerDelta,
  pruneObserved,
} from '../db/discovery.ts'
import type { Sql } from '../db/sql.ts'
import { LATENCY_BUCKETS, latencyBucket } from '../discovery/observed.ts'
import type { Logger } from '../observability/logger.ts'

const HOUR_MS = 3_600_000
const DAY_MS = 86_400_000
/** Rows older than this serve no 7-day listing. */
const KEEP_MS = 8 * DAY_MS

export interface ObservedCall {
  endpointId: string
  /** An MCP tool (a bounded name, or "other"): counted for the tool too; null for a plain endpoint. */
  tool: string | null
  payer: string
  /** The upstream answered below 500 and the call was charged. */
  served: boolean
  /** Time to the upstream's response head; null when it never answered. */
  upstreamMs: number | null
  /**
   * Who called, on an endpoint with identity rules: a configured signer's name or "unsigned" (bounded by the
   * operator's names); absent elsewhere, which counts nothing more.
   */
  signer?: string | null
}

export class ObservedCalls {
  private hours = new Map<string, HourlyDelta>()
  private payers = new Map<string, PayerDelta>()
  private deliveries: Delivered[] = []
  private agents = new Map<string, AgentDelta>()
  private timer: NodeJS.Timeout | null = null
  private flushing: Promise<void> = Promise.resolve()
  private lastPruneMs = 0
  private dayMs = -1
  private day = ''

  constructor(
    private readonly sql: Sql,
    private readonly logger: Logger,
    private readonly now: () => number = Date.now,
  ) {}

  record(call: ObservedCall): void {
    const nowMs = this.now()
    const hourMs = nowMs - (nowMs % HOUR_MS)
    const dayMs = nowMs - (nowMs % DAY_MS)
    // The day's string is made once a day, not once a call.
    if (dayMs !== this.dayMs) {
      this.dayMs = dayMs
      this.day = new Date(dayMs).toISOString().slice(0, 10)
    }
    const day = this.day
    const payer = call.payer.toLowerCase()
    this.count(call, null, hourMs, day, payer)
    // An MCP tool's calls count for the endpoint and for the tool (its own discovery item).
    if (call.tool !== null) this.count(call, call.tool, hourMs, day, payer)
    if (call.signer) this.countAgent(call.endpointId, call.signer, hourMs, call.served)
  }

  private countAgent(endpointId: string, signer: string, hourMs: number, served: boolean): void {
    const key = `${endpointId}|${signer}|${hourMs}`
    let a = this.agents.get(key)
    if (a === undefined) {
      a = { endpointId, signer, hour: new Date(hourMs), paidCalls: 0, succeeded: 0 }
      this.agents.set(key, a)
    }
    a.paidCalls++
    if (served) a.succeeded++
  }

  private count(call: ObservedCall, tool: string | null, hourMs: number, day: string, payer: string): void {
    const key = `${call.endpointId}|${tool ?? ''}|${hourMs}`
    let h = this.hours.get(key)
    if (h === undefined) {
      h = {
        endpointId: call.endpointId,
        tool,
        hour: new Date(hourMs),
        paidCalls: 0,
        succeeded: 0,
        unserved: 0,
        latencyBuckets: new Array<number>(LATENCY_BUCKETS).fill(0),
      }
      this.hours.set(key, h)
    }
    h.paidCalls++
    if (call.served) h.succeeded++
    else h.unserved++
    if (call.upstreamMs !== null) h.latencyBuckets[latencyBucket(call.upstreamMs)]!++
    const pkey = `${call.endpointId}|${tool ?? ''}|${day}|${payer}`
    const p = this.payers.get(pkey)
    if (p === undefined) this.payers.set(pkey, { endpointId: call.endpointId, tool, day, payer, calls: 1 })
    else p.calls++
  }

  /** What a paid answer delivered (its body's SHA-256 and length), shown on its signed final receipt. */
  delivered(receiptId: string, bodySha256: string, bodyBytes: number): void {
    this.deliveries.push({ receiptId, bodySha256, bodyBytes, deliveredAt: new Date() })
  }

  start(intervalMs: number): this {
    this.timer = setInterval(() => void this.flush(), intervalMs)
    this.timer.unref()
    return this
  }

  /** Adds what was counted since the last flush; counts that fail to write are kept for the next one. */
  flush(): Promise<void> {
    this.flushing = this.flushing.then(() => this.write())
    return this.flushing
  }

  private async write(): Promise<void> {
    if (this.hours.size === 0 && this.payers.size === 0 && this.deliveries.length === 0) return
    const hours = [...this.hours.values()]
    const payers = [...this.payers.values()]
    const agents = [...this.agents.values()]
    const delivered = this.deliveries
    this.hours = new Map()
    this.payers = new Map()
    this.agents = new Map()
    this.deliveries = []
    try {
      await addObserved(this.sql, hours, payers, delivered, agents)
      const nowMs = this.now()
      if (nowMs - this.lastPruneMs > HOUR_MS) {
        this.lastPruneMs = nowMs
        await pruneObserved(this.sql, new Date(nowMs - KEEP_MS))
      }
    } catch (err) {
      this.logger.warn('observed call counts not written; kept for the next flush', { err })
      for (const h of hours) this.mergeHour(h)
      for (const p of payers) this.mergePayer(p)
      for (const a of agents) this.mergeAgent(a)
      this.deliveries.push(...delivered)
    }
  }

  private mergeHour(h: HourlyDelta): void {
    const key = `${h.endpointId}|${h.tool ?? ''}|${h.hour.getTime()}`
    const cur = this.hours.get(key)
    if (cur === undefined) return void this.hours.set(key, h)
    cur.paidCalls += h.paidCalls
    cur.succeeded += h.succeeded
    cur.unserved += h.unserved
    for (let i = 0; i < LATENCY_BUCKETS; i++) cur.latencyBuckets[i]! += h.latencyBuckets[i]!
  }

  private mergeAgent(a: AgentDelta): void {
    const key = `${a.endpointId}|${a.signer}|${a.hour.getTime()}`
    const cur = this.agents.get(key)
    if (cur === undefined) return void this.agents.set(key, a)
    cur.paidCalls += a.paidCalls
    cur.succeeded += a.succeeded
  }

  private mergePayer(p: PayerDelta): void {
    const key = `${p.endpointId}|${p.tool ?? ''}|${p.day}|${p.payer}`
    const cur = this.payers.get(key)
    if (cur === undefined) this.payers.set(key, p)
    else cur.calls += p.calls
  }

  async stop(): Promise<void> {
    if (this.timer !== null) clearInterval(this.timer)
    this.timer = null
    await this.flush()
  }
}
