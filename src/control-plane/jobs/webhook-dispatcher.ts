// Webhook dispatcher: fans new outbox events out to subscribed webhooks, then sends due deliveries, signed
// (Standard Webhooks), with a timeout per attempt, a per-webhook concurrency limit, jittered retries that
// honour Retry-After, every attempt recorded, and webhooks disabled on 410 or after failing too long.
//
// It runs on the leader only: the job runner calls poll() there, every poll_interval_ms; a NOTIFY on
// tollgate_event_created (server databases) or a delivery falling due wakes it sooner while this instance
// is still being polled. Claims are row locks (SKIP LOCKED) plus a lease, so even two dispatchers on one
// database never send one delivery at once, and a crashed sender's delivery comes back when its lease ends.
import { Agent, request } from 'undici'
import { EVENT_CREATED_CHANNEL } from '../../db/events.ts'
import type { Sql } from '../../db/sql.ts'
import {
  type AttemptResult,
  type ClaimedDelivery,
  claimDueDeliveries,
  fanOutEvents,
  msUntilNextDue,
  recordAttempt,
} from '../../db/webhook-deliveries.ts'
import type { Logger } from '../../observability/logger.ts'
import { webhookDeliveries, webhookLag } from '../../observability/metrics.ts'
import { endSpan, startSpan, traceparentOf, tracing } from '../../observability/tracing.ts'
import { guardedConnector } from '../../ssrf.ts'
import type { BackgroundModule, JobDeps } from './runner.ts'
import { signedHeaders } from './webhook-signature.ts'

export const WEBHOOK_JOB = 'webhook-dispatch'

/** Deliveries in flight across all webhooks (each webhook is held to webhooks.concurrency of them). */
const MAX_IN_FLIGHT = 256
const FAN_OUT_BATCH = 200
/** A claim outlives the attempt's timeout by this much before another sender may take the row. */
const LEASE_MARGIN_MS = 30_000
/** A Retry-After is honoured up to a day; beyond that the schedule's own delays take over. */
const MAX_RETRY_AFTER_MS = 24 * 60 * 60 * 1000
/** Enough of a response body to let the connection be reused; the rest is discarded. */
const RESPONSE_DUMP_BYTES = 64 * 1024

export interface WebhookSettings {
  retryScheduleMs: readonly number[]
  timeoutMs: number
  concurrency: number
  disableAfterMs: number
  pollIntervalMs: number
  allowPrivate: boolean
}

export function createWebhookJobs(deps: JobDeps): BackgroundModule {
  const w = deps.config.webhooks
  const dispatcher = new WebhookDispatcher(deps.sql, {
    logger: deps.logger,
    listen: !deps.embedded,
    settings: {
      retryScheduleMs: w.retry_schedule_ms,
      timeoutMs: w.timeout_ms,
      concurrency: w.concurrency,
      disableAfterMs: w.disable_after_ms,
      pollIntervalMs: w.poll_interval_ms,
      allowPrivate: deps.config.proxy.allow_private_upstreams,
    },
  })
  return {
    jobs: [{ name: WEBHOOK_JOB, intervalMs: w.poll_interval_ms, run: () => dispatcher.poll() }],
    stop: () => dispatcher.stop(),
  }
}

export class WebhookDispatcher {
  private readonly agent: Agent
  private readonly inFlight = new Set<Promise<void>>()
  private readonly perWebhook = new Map<string, number>()
  private running: Promise<void> | null = null
  private again = false
  private stopped = false
  /** The runner polls only the leader: wake-ups count while polls keep coming. */
  private polledUntil = 0
  private timer: NodeJS.Timeout | null = null
  private unlisten: Promise<(() => Promise<void>) | null> | null = null

  constructor(
    private readonly sql: Sql,
    private readonly options: { logger: Logger; listen: boolean; settings: WebhookSettings },
  ) {
    const timeout = options.settings.timeoutMs
    this.agent = new Agent({
      connect: options.settings.allowPrivate ? { timeout } : guardedConnector(timeout),
      headersTimeout: timeout,
      bodyTimeout: timeout,
    })
  }

  /** One pass now (called by the job runner on the leader, and by tests through runNow). */
  poll(): Promise<void> {
    if (this.stopped) return Promise.resolve()
    this.polledUntil = Date.now() + 3 * this.options.settings.pollIntervalMs
    if (this.options.listen && !this.unlisten) this.unlisten = this.startListening()
    return this.runPass()
  }

  /** Stops taking work and waits for attempts in flight (each bounded by the timeout). */
  async stop(): Promise<void> {
    this.stopped = true
    if (this.timer) clearTimeout(this.timer)
    const unlisten = await this.unlisten
    await unlisten?.().catch(() => {})
    await this.running
    await Promise.allSettled([...this.inFlight])
    await this.agent.close()
  }

  private wake(): void {
    if (this.stopped || Date.now() > this.polledUntil) return
    void this.runPass()
  }

  private async startListening(): Promise<(() => Promise<void>) | null> {
    try {
      const { unlisten } = await this.sql.listen(EVENT_CREATED_CHANNEL, () => this.wake())
      return unlisten
    } catch (err) {
      this.options.logger.warn('webhooks: LISTEN failed; relying on the poll', { err })
      return null
    }
  }

  /** Passes never overlap: a wake-up during one asks for another right after it. */
  private runPass(): Promise<void> {
    if (this.running) {
      this.again = true
      return this.running
    }
    this.running = (async () => {
      do {
        this.again = false
        await this.pass()
      } while (this.again && !this.stopped)
    })()
      .catch((err) => this.options.logger.error('webhook dispatch pass failed', { err }))
      .finally(() => {
        this.running = null
      })
    return this.running
  }

  private async pass(): Promise<void> {
    const { settings } = this.options
    // Fan-out first, so a new event's deliveries are claimable in this same pass.
    for (let i = 0; i < 10; i++) {
      const r = await fanOutEvents(this.sql, { batch: FAN_OUT_BATCH })
      if (r.events < FAN_OUT_BATCH) break
    }
    for (let round = 0; round < 5 && !this.stopped; round++) {
      const free = MAX_IN_FLIGHT - this.inFlight.size
      if (free <= 0) break
      const saturated = [...this.perWebhook].filter(([, n]) => n >= settings.concurrency).map(([id]) => id)
      const claimed = await claimDueDeliveries(this.sql, {
        limit: free,
        perWebhookFree: (id) => settings.concurrency - (this.perWebhook.get(id) ?? 0),
        exclude: saturated,
        leaseMs: settings.timeoutMs + LEASE_MARGIN_MS,
      })
      for (const d of claimed) this.launch(d)
      if (claimed.length === 0) break
    }
    await this.scheduleNextDue()
  }

  /** A retry due before the next poll gets a timer of its own (short schedules, tests). */
  private async scheduleNextDue(): Promise<void> {
    const ms = await msUntilNextDue(this.sql)
    if (this.timer) clearTimeout(this.timer)
    this.timer = null
    if (ms === null || ms >= this.options.settings.pollIntervalMs || this.stopped) return
    this.timer = setTimeout(() => this.wake(), Math.max(0, ms) + 5)
    this.timer.unref()
  }

  private launch(d: ClaimedDelivery): void {
    this.perWebhook.set(d.webhook_id, (this.perWebhook.get(d.webhook_id) ?? 0) + 1)
    const p: Promise<void> = this.deliver(d)
      .catch((err) =>
        // The lease runs out and the delivery is tried again: nothing is lost, it may arrive twice.
        this.options.logger.error('webhook attempt could not be recorded', { delivery_id: d.id, err }),
      )
      .finally(() => {
        const n = (this.perWebhook.get(d.webhook_id) ?? 1) - 1
        if (n > 0) this.perWebhook.set(d.webhook_id, n)
        else this.perWebhook.delete(d.webhook_id)
        this.inFlight.delete(p)
        // A slot is free: more may be due.
        this.wake()
      })
    this.inFlight.add(p)
  }

  private async deliver(d: ClaimedDelivery): Promise<void> {
    const { settings, logger } = this.options
    // Tracing on: a span per attempt, and the receiver gets its traceparent.
    const span = tracing.on
      ? startSpan(
          'webhook delivery',
          { 'tollgate.webhook_id': d.webhook_id, 'tollgate.event_id': d.event_id },
          true,
        )
      : null
    const outcome = await sendOnce(
      this.agent,
      d,
      settings.timeoutMs,
      span === null ? null : traceparentOf(span),
    )
    if (span !== null) endSpan(span, outcome.statusCode ?? undefined, outcome.error ?? undefined)
    const attemptsMade = d.attempts + 1
    let result: AttemptResult
    if (outcome.statusCode !== null && outcome.statusCode >= 200 && outcome.statusCode < 300) {
      result = { kind: 'delivered', statusCode: outcome.statusCode, latencyMs: outcome.latencyMs }
      webhookDeliveries.labels('delivered').inc()
      webhookLag.observe(Math.max(0, Date.now() - d.event_created_at.getTime()) / 1000)
    } else {
      webhookDeliveries.labels(outcome.statusCode === null ? 'error' : 'failed').inc()
      const delayMs = retryDelayMs(settings.retryScheduleMs, attemptsMade, outcome.retryAfterMs)
      const base = { statusCode: outcome.statusCode, latencyMs: outcome.latencyMs, error: outcome.error }
      result = delayMs === null ? { kind: 'exhausted', ...base } : { kind: 'retry', ...base, delayMs }
    }
    const recorded = await recordAttempt(this.sql, {
      delivery: d,
      result,
      gone: outcome.statusCode === 410,
      disableAfterMs: settings.disableAfterMs,
    })
    if (recorded.disabled) {
      logger.warn('webhook disabled', {
        webhook_id: d.webhook_id,
        reason: recorded.disabled,
        detail:
          recorded.disabled === 'gone'
            ? 'the receiver answered 410 Gone'
            : `failing for more than ${settings.disableAfterMs} ms`,
      })
    }
    if (result.kind === 'exhausted') {
      logger.warn('webhook delivery failed after its last retry', {
        webhook_id: d.webhook_id,
        delivery_id: d.id,
        event_id: d.event_id,
        attempts: attemptsMade,
      })
    }
  }
}

/** The body every receiver gets; built from the stored event, so each attempt sends the same bytes. */
export function eventPayload(
  d: Pick<ClaimedDelivery, 'event_id' | 'event_type' | 'event_created_at' | 'event_data'>,
) {
  return JSON.stringify({
    id: d.event_id,
    type: d.event_type,
    created_at: d.event_created_at.toISOString(),
    data: d.event_data,
  })
}

interface SendOutcome {
  statusCode: number | null
  latencyMs: number
  error: string | null
  retryAfterMs: number | null
}

async function sendOnce(
  agent: Agent,
  d: ClaimedDelivery,
  timeoutMs: number,
  traceparent: string | null,
): Promise<SendOutcome> {
  const body = eventPayload(d)
  const secrets = d.previous_secret ? [d.secret, d.previous_secret] : [d.secret]
  const started = performance.now()
  // One deadline for the whole attempt: connect, headers and the (discarded) body.
  const signal = AbortSignal.timeout(timeoutMs)
  try {
    const res = await request(d.url, {
      method: 'POST',
      dispatcher: agent,
      signal,
      headers: {
        'content-type': 'application/json',
        'user-agent': 'tollgate-webhooks/1',
        ...signedHeaders({ id: d.event_id, body, secrets }),
        ...(traceparent === null ? undefined : { traceparent }),
      },
      body,
    })
    const latencyMs = performance.now() - started
    await res.body.dump({ limit: RESPONSE_DUMP_BYTES, signal }).catch(() => {})
    return {
      statusCode: res.statusCode,
      latencyMs,
      error:
        res.statusCode >= 200 && res.statusCode < 300
          ? null
          : `http_status: receiver answered ${res.statusCode}`,
      retryAfterMs: parseRetryAfter(res.headers['retry-after']),
    }
  } catch (err) {
    return {
      statusCode: null,
      latencyMs: performance.now() - started,
      error: describeError(err, timeoutMs),
      retryAfterMs: null,
    }
  }
}

/** Stable reason first (snake_case), then a human detail; never the URL's secrets or the payload. */
export function describeError(err: unknown, timeoutMs: number): string {
  const e = err as { name?: string; code?: string; message?: string; cause?: { code?: string } }
  const code = e.code ?? e.cause?.code
  if (e.name === 'TimeoutError' || code === 'UND_ERR_HEADERS_TIMEOUT' || code === 'UND_ERR_BODY_TIMEOUT') {
    return `timeout: no answer within ${timeoutMs} ms`
  }
  if (code === 'UND_ERR_CONNECT_TIMEOUT') return `timeout: could not connect within ${timeoutMs} ms`
  if (code === 'ECONNREFUSED') return 'connection_refused: the receiver refused the connection'
  if (code === 'ERR_TOLLGATE_PRIVATE_TARGET') return 'private_target: the URL resolves to a private address'
  if (code === 'ENOTFOUND' || code === 'EAI_AGAIN') return `dns_error: ${code}`
  if (code === 'ECONNRESET' || code === 'UND_ERR_SOCKET') return 'connection_reset: the connection was closed'
  if (typeof code === 'string' && /CERT|TLS|SSL/.test(code)) return `tls_error: ${code}`
  return `network_error: ${code ?? e.name ?? 'unknown'}`
}

/**
 * Delay before the next attempt after `attemptsMade` attempts, or null when the schedule is spent.
 * ±20 % jitter spreads retries of many deliveries that failed together; a Retry-After is never undercut.
 */
export function retryDelayMs(
  scheduleMs: readonly number[],
  attemptsMade: number,
  retryAfterMs: number | null,
  random: () => number = Math.random,
): number | null {
  const base = scheduleMs[attemptsMade - 1]
  if (base === undefined) return null
  const jittered = base * (0.8 + 0.4 * random())
  return Math.round(Math.max(jittered, Math.min(retryAfterMs ?? 0, MAX_RETRY_AFTER_MS)))
}

/** Retry-After: delta-seconds or an HTTP date; null if absent or unreadable. */
export function parseRetryAfter(raw: string | string[] | undefined, nowMs = Date.now()): number | null {
  const value = Array.isArray(raw) ? raw[0] : raw
  if (!value) return null
  if (/^\s*\d+\s*$/.test(value)) return Number(value) * 1000
  const at = Date.parse(value)
  return Number.isNaN(at) ? null : Math.max(0, at - nowMs)
}
