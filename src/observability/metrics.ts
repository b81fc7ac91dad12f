// Every metric the service exports, declared once: tollgate_<subsystem>_<name>_<unit>, bounded labels only.
import client from 'prom-client'

/**
 * How long one scrape waits for a sampler or a readiness check (the database, the RPC node) before keeping
 * its last value (Prometheus' default scrape timeout is 10 s).
 */
export const SCRAPE_SAMPLE_TIMEOUT_MS = 3_000

/**
 * The registry, sampling the values read at scrape time (readiness, backlogs, the treasury) before every
 * read: the admin port's /metrics, and with server.workers > 1 the parent's request over cluster IPC, which
 * reads each worker's registry with getMetricsAsJSON and never passes through a worker's admin port.
 */
class SampledRegistry extends client.Registry {
  override async metrics(): Promise<string> {
    await runScrapeSamplers(SCRAPE_SAMPLE_TIMEOUT_MS)
    return super.metrics()
  }

  override async getMetricsAsJSON(): ReturnType<client.Registry['getMetricsAsJSON']> {
    await runScrapeSamplers(SCRAPE_SAMPLE_TIMEOUT_MS)
    return super.getMetricsAsJSON()
  }
}

export const registry = new SampledRegistry()
client.collectDefaultMetrics({ register: registry, prefix: 'tollgate_' })

/**
 * In a worker process (server.workers > 1): answer the parent's requests for this registry over cluster IPC,
 * so its /metrics can sum the workers. prom-client only starts listening when an AggregatorRegistry is
 * constructed; setRegistries alone leaves the parent waiting until its 5 s timeout, on every scrape.
 */
export function answerParentMetrics(): void {
  client.AggregatorRegistry.setRegistries([registry])
  new client.AggregatorRegistry()
}

const LATENCY_BUCKETS = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30]

/** route: a fixed route group ('api', 'metered', 'checkout', 'other'); status_class: '2xx'…'5xx'. */
export const httpRequests = new client.Counter({
  name: 'tollgate_http_requests_total',
  help: 'HTTP requests answered on the public port, by route group and status class.',
  labelNames: ['route', 'status_class'] as const,
  registers: [registry],
})

export const httpDuration = new client.Histogram({
  name: 'tollgate_http_request_duration_seconds',
  help: 'Time from request to the end of the response, by route group and status class.',
  labelNames: ['route', 'status_class'] as const,
  buckets: LATENCY_BUCKETS,
  registers: [registry],
})

export const paymentRequired = new client.Counter({
  name: 'tollgate_metered_payment_required_total',
  help: '402 answers on metered and checkout routes, by reason.',
  labelNames: ['reason'] as const,
  registers: [registry],
})

/**
 * Agent identity outcomes on endpoints with identity rules. signer: a name the operator configured, or
 * 'none' (never the caller's text); outcome: verified, unsigned, or the snake_case failure reason.
 */
export const agentIdentity = new client.Counter({
  name: 'tollgate_agent_identity_total',
  help: 'Agent signatures checked on metered calls, by configured signer and outcome.',
  labelNames: ['signer', 'outcome'] as const,
  registers: [registry],
})

export const agentCalls = new client.Counter({
  name: 'tollgate_agent_calls_total',
  help: 'Metered calls to endpoints with identity rules, by who called (a configured signer, "unsigned", or "other") and the action of the rule that applied.',
  labelNames: ['signer', 'action'] as const,
  registers: [registry],
})

export const agentRevenueAtomic = new client.Counter({
  name: 'tollgate_agent_revenue_atomic_total',
  help: 'USDC base units captured from calls to endpoints with identity rules, by who called (a configured signer, "unsigned", or "other").',
  labelNames: ['signer'] as const,
  registers: [registry],
})

export const verifications = new client.Counter({
  name: 'tollgate_verify_outcomes_total',
  help: 'Proof verifications by proof kind, source (cache/rpc) and outcome.',
  labelNames: ['kind', 'source', 'outcome'] as const,
  registers: [registry],
})

export const rpcDuration = new client.Histogram({
  name: 'tollgate_chain_rpc_duration_seconds',
  help: "Latency of proof verification RPC look-ups (a transaction, or an authorization's nonce and balance).",
  buckets: LATENCY_BUCKETS,
  registers: [registry],
})

// Both counted after batching; method labels come from tollgate's own calls only (a bounded set).
export const rpcRequests = new client.Counter({
  name: 'tollgate_rpc_requests_total',
  help: "HTTP requests to the RPC node, by JSON-RPC method ('batch' when one request carries several calls).",
  labelNames: ['method'] as const,
  registers: [registry],
})

export const rpcCalls = new client.Counter({
  name: 'tollgate_rpc_calls_total',
  help: 'JSON-RPC calls sent to the RPC node (each call of a batch counted), by method.',
  labelNames: ['method'] as const,
  registers: [registry],
})

/** Counts one HTTP request to the RPC node and the calls it carries (the chain client's listener). */
export function countRpcRequest(request: string, calls: string[]): void {
  rpcRequests.inc({ method: request })
  for (const method of calls) rpcCalls.inc({ method })
}

export const cacheLookups = new client.Counter({
  name: 'tollgate_cache_lookups_total',
  help: 'Hot-path cache look-ups by cache and result (hit/miss).',
  labelNames: ['cache', 'result'] as const,
  registers: [registry],
})

export const claimBatchSize = new client.Histogram({
  name: 'tollgate_claims_batch_size',
  help: 'Proof claims written per database round trip (group commit).',
  buckets: [1, 2, 4, 8, 16, 32, 64, 128, 256],
  registers: [registry],
})

export const captureBatchSize = new client.Histogram({
  name: 'tollgate_captures_batch_size',
  help: 'Call captures written per database round trip.',
  buckets: [1, 2, 4, 8, 16, 32, 64, 128, 256],
  registers: [registry],
})

/** batch-settlement voucher writes (leases: one statement for many channels and calls). */
export const voucherWrites = new client.Counter({
  name: 'tollgate_batch_voucher_writes_total',
  help: 'Group-committed voucher writes (highest voucher per leased channel + the calls served), by outcome.',
  labelNames: ['outcome'] as const,
  registers: [registry],
})

export const voucherCallsLost = new client.Counter({
  name: 'tollgate_batch_voucher_calls_lost_total',
  help: 'Calls served under a channel lease whose voucher could not be persisted (lease taken over): unpaid.',
  registers: [registry],
})

export const booksWrites = new client.Counter({
  name: 'tollgate_books_writes_total',
  help: 'Claim/capture statements written (one commit each): claims and captures share them under load.',
  registers: [registry],
})

export const booksWriteDuration = new client.Histogram({
  name: 'tollgate_books_write_duration_seconds',
  help: 'Time of one claim/capture statement, send to commit acknowledged: what a claim waits for, twice at most.',
  buckets: LATENCY_BUCKETS,
  registers: [registry],
})

export const captureQueue = new client.Gauge({
  name: 'tollgate_captures_waiting',
  help: 'Captures of served calls not yet durable (queued or being written); never dropped while the process lives.',
  registers: [registry],
})

export const captureRetries = new client.Counter({
  name: 'tollgate_captures_retries_total',
  help: 'Batches whose captures were queued again after a failed write (database down or restarting).',
  registers: [registry],
})

export const passDraws = new client.Counter({
  name: 'tollgate_pass_draws_total',
  help:
    'Signed-in calls on a pass, by outcome: drawn, given_back (not served), refused (sign-in refused), ' +
    'replayed (sign-in nonce used before), none (no live pass), unknown (the draw failed in flight), ' +
    'recovered (a draw lost in flight had committed: its use given back).',
  labelNames: ['outcome'] as const,
  registers: [registry],
})

export const passesBought = new client.Counter({
  name: 'tollgate_passes_bought_total',
  help: 'Passes opened from a captured purchase.',
  registers: [registry],
})

export const claimReleases = new client.Counter({
  name: 'tollgate_claims_released_total',
  help: 'Claims released for a retry after a failed upstream attempt, by result (released/refused/failed).',
  labelNames: ['result'] as const,
  registers: [registry],
})

export const upstreamDuration = new client.Histogram({
  name: 'tollgate_upstream_duration_seconds',
  help: 'Time until the upstream answered with headers, by status class.',
  labelNames: ['status_class'] as const,
  buckets: LATENCY_BUCKETS,
  registers: [registry],
})

export const upstreamErrors = new client.Counter({
  name: 'tollgate_upstream_errors_total',
  help: 'Upstream failures by code (unreachable, timeout, private_target, reset).',
  labelNames: ['code'] as const,
  registers: [registry],
})

export const callsCaptured = new client.Counter({
  name: 'tollgate_calls_captured_total',
  help: 'Metered calls captured (charged).',
  registers: [registry],
})

/**
 * Paid answers delivered whole, by where what they delivered was recorded: on the call row (its capture was
 * still queued) or apart, a few seconds later (call_deliveries). Labels made once: counted per answer.
 */
export const paidDeliveries = new client.Counter({
  name: 'tollgate_paid_deliveries_total',
  help: 'Paid answers delivered whole, by where their digest was recorded (call row, or a record apart).',
  labelNames: ['record'] as const,
  registers: [registry],
})
export const deliveriesOnCall = paidDeliveries.labels('call_row')
export const deliveriesApart = paidDeliveries.labels('apart')

export const capturedAtomic = new client.Counter({
  name: 'tollgate_calls_captured_atomic_total',
  help: 'USDC base units captured from metered calls.',
  registers: [registry],
})

export const usageCapped = new client.Counter({
  name: 'tollgate_usage_capped_total',
  help: 'Usage-priced calls whose measured charge was above the ceiling offered in the 402 (charged the ceiling).',
  registers: [registry],
})

/** WebSocket sessions (src/data-plane/ws-session.ts): open now, how they ended, what they relayed. */
export const websocketSessionsOpen = new client.Gauge({
  name: 'tollgate_websocket_sessions_open',
  help: 'Paid WebSocket sessions open on this process.',
  registers: [registry],
})
export const websocketSessions = new client.Counter({
  name: 'tollgate_websocket_sessions_total',
  help: 'Paid WebSocket sessions ended, by who ended them (client, upstream, credit, window, too_big, backpressure).',
  labelNames: ['end'] as const,
  registers: [registry],
})
export const websocketFrames = new client.Counter({
  name: 'tollgate_websocket_frames_total',
  help: 'WebSocket messages relayed, by direction (to_upstream, to_client).',
  labelNames: ['direction'] as const,
  registers: [registry],
})
export const websocketBytes = new client.Counter({
  name: 'tollgate_websocket_bytes_total',
  help: 'WebSocket message bytes relayed, by direction (to_upstream, to_client).',
  labelNames: ['direction'] as const,
  registers: [registry],
})
export const websocketTopUps = new client.Counter({
  name: 'tollgate_websocket_top_ups_total',
  help: 'Top-ups sent on open WebSocket sessions, by outcome (taken, refused).',
  labelNames: ['outcome'] as const,
  registers: [registry],
})

export const websocketChargedAtomic = new client.Counter({
  name: 'tollgate_websocket_charged_atomic_total',
  help: 'USDC base units charged for WebSocket sessions (the rest of each payment is refunded).',
  registers: [registry],
})

export const mcpToolRevenueAtomic = new client.Counter({
  name: 'tollgate_mcp_tool_revenue_atomic_total',
  help: 'USDC base units captured from paid MCP tools/call, by tool (names merchants configured; any other tool is "other").',
  labelNames: ['tool'],
  registers: [registry],
})

export const mcpToolCalls = new client.Counter({
  name: 'tollgate_mcp_tool_calls_total',
  help: 'Paid MCP tools/call captured, by tool (names merchants configured; any other tool is "other").',
  labelNames: ['tool'],
  registers: [registry],
})

export const payoutBatches = new client.Counter({
  name: 'tollgate_payouts_batches_total',
  help: 'Payout batches run, by outcome.',
  labelNames: ['outcome'] as const,
  registers: [registry],
})

export const payoutAtomic = new client.Counter({
  name: 'tollgate_payouts_sent_atomic_total',
  help: 'USDC base units paid out (owner shares and refunds), by kind.',
  labelNames: ['kind'] as const,
  registers: [registry],
})

export const webhookDeliveries = new client.Counter({
  name: 'tollgate_webhooks_deliveries_total',
  help: 'Webhook delivery attempts by outcome (delivered, failed, error).',
  labelNames: ['outcome'] as const,
  registers: [registry],
})

export const webhookLag = new client.Histogram({
  name: 'tollgate_webhooks_delivery_lag_seconds',
  help: 'Time from event creation to successful delivery.',
  buckets: [0.1, 0.5, 1, 5, 30, 60, 300, 1800, 7200, 86400],
  registers: [registry],
})

export const dbPoolSize = new client.Gauge({
  name: 'tollgate_db_pool_connections',
  help: 'Configured database pool size.',
  registers: [registry],
})

/** sync_state: sync | quorum | potential | async | unknown (the role may not read it). Set by src/db/replication-watch.ts. */
export const standbysBySyncState = new client.Gauge({
  name: 'tollgate_db_standbys',
  help: "Physical standbys streaming from the primary, by pg_stat_replication's sync_state (0 on the embedded database).",
  labelNames: ['sync_state'] as const,
  aggregator: 'max',
  registers: [registry],
})

export const replicationUnsafe = new client.Gauge({
  name: 'tollgate_db_replication_unsafe',
  help: '1 while standbys are attached and none is synchronous (or synchronous_commit is off/local): a failover would serve the last proofs twice.',
  aggregator: 'max',
  registers: [registry],
})

export const jobLeader = new client.Gauge({
  name: 'tollgate_jobs_leader',
  help: '1 when this instance holds the background-job leadership lock.',
  registers: [registry],
})

export function statusClass(status: number): '1xx' | '2xx' | '3xx' | '4xx' | '5xx' {
  return status < 200 ? '1xx' : status < 300 ? '2xx' : status < 400 ? '3xx' : status < 500 ? '4xx' : '5xx'
}

/** reason: usdc_short | gas_short. 1 while the payout batcher is stopped for that reason. */
export const payoutBlocked = new client.Gauge({
  name: 'tollgate_payouts_blocked',
  help: '1 while payouts are stopped because the treasury is short of USDC or of gas, by reason.',
  labelNames: ['reason'] as const,
  aggregator: 'max',
  registers: [registry],
})

export const payoutFailures = new client.Counter({
  name: 'tollgate_payouts_failed_total',
  help: 'Payouts marked failed (entries put back for a retry), by reason (reverted, nonce_taken).',
  labelNames: ['reason'] as const,
  registers: [registry],
})

export const payoutsOpen = new client.Gauge({
  name: 'tollgate_payouts_open',
  help: 'Payouts recorded or broadcast but not yet confirmed or failed.',
  aggregator: 'max',
  registers: [registry],
})

// ---- x402 settlement. The backlog gauges are the sampled ones below (ops-gauges.ts). -----------
/** outcome: settled, expired, reverted, broadcast_failed, receipt_error, lost. */
export const settlements = new client.Counter({
  name: 'tollgate_x402_settlements_total',
  help: 'x402 settlement outcomes per authorization: settled, expired, reverted, broadcast_failed, receipt_error, lost (unmined, re-signed), unattempted (left out of a batch short of gas, re-signed).',
  labelNames: ['outcome'] as const,
  registers: [registry],
})

/** outcome: settled, zero_charge, expired, reverted, over_maximum, not_our_facilitator, broadcast_failed, receipt_error, lost, unattempted. */
export const uptoSettlements = new client.Counter({
  name: 'tollgate_x402_upto_settlements_total',
  help: 'x402 upto settlement outcomes per permit: settled (for the charge), zero_charge (nothing to send), expired, reverted, over_maximum (charge above the signed maximum: never sent), broadcast_failed, receipt_error, lost (unmined, re-signed), unattempted (re-signed).',
  labelNames: ['outcome'] as const,
  registers: [registry],
})

/** check: verdict (the /verify of the same body, held in this process), full (another instance, expired, a retry). */
export const facilitatorSettleChecks = new client.Counter({
  name: 'tollgate_facilitator_settle_checks_total',
  help: 'Facilitator /settle requests by how their payload was checked: verdict (the /verify of the same body in this process served it: no recovery, no chain read) or full.',
  labelNames: ['check'] as const,
  registers: [registry],
})

export const settlementThrottled = new client.Gauge({
  name: 'tollgate_x402_intake_throttled',
  help: '1 while new x402 payloads are refused: 503 settlement_backlog (backlog past its limits) or settlement_halted (the token cannot pay the treasury).',
  aggregator: 'max',
  registers: [registry],
})

/** 1 while USDC cannot move money to the treasury (paused, or the treasury blacklisted): x402 intake stops. */
export const tokenHalted = new client.Gauge({
  name: 'tollgate_x402_token_halted',
  help: '1 while USDC cannot move money to the treasury (the token paused, or the treasury blacklisted): new x402 payloads get 503 settlement_halted.',
  labelNames: ['state'] as const,
  aggregator: 'max',
  registers: [registry],
})

export const settlementBatchSize = new client.Histogram({
  name: 'tollgate_x402_settlement_batch_size',
  help: 'x402 authorizations broadcast together per settlement step (their transactions on consecutive treasury nonces).',
  buckets: [1, 5, 10, 25, 50, 100, 200, 500],
  registers: [registry],
})

/**
 * Settle before the answer, where an answer's wait goes. phase: capture (served → its capture committed),
 * queue (committed → its transaction's turn to be signed), send (sign, record the hash, broadcast; per
 * transaction group), receipt (broadcast → receipt read; per transaction). Observed per call for the first two.
 */
export const earlySettlementPhase = new client.Histogram({
  name: 'tollgate_x402_settle_before_answer_phase_seconds',
  help: 'Settle-before-answer time by phase: queue (per call); sign, capture, turn, broadcast, send, receipt (per group).',
  labelNames: ['phase'] as const,
  buckets: LATENCY_BUCKETS,
  registers: [registry],
})

export const earlySettlementBatchSize = new client.Histogram({
  name: 'tollgate_x402_settle_before_answer_batch_size',
  help: 'Authorizations signed, recorded and broadcast together by the settle-before-answer path.',
  buckets: [1, 2, 5, 10, 25, 50, 100, 200],
  registers: [registry],
})

/** Usage-priced answers held whole to settle their charge first (held), or let go streaming (oversize). */
export const heldAnswers = new client.Counter({
  name: 'tollgate_x402_held_answers_total',
  help: 'Usage-priced answers held until their upto settlement (held), or over held_answer_max_bytes (oversize).',
  labelNames: ['outcome'] as const,
  registers: [registry],
})

/**
 * The gas a settler slot holds (ETH), and the floor below which its process's /readyz fails and the alert
 * fires (settlement.before_answer.gas_floor_eth): one series per slot this process owns (bounded by
 * settlement.before_answer.slots). Read every gas_check_ms and after each of its transactions' receipts.
 */
export const settlerBalance = new client.Gauge({
  name: 'tollgate_x402_settler_balance_eth',
  help: 'ETH held by the settle-before-answer settler key of this process, by slot.',
  labelNames: ['slot'] as const,
  registers: [registry],
})

export const settlerBalanceFloor = new client.Gauge({
  name: 'tollgate_x402_settler_balance_floor_eth',
  help: 'The settler balance below which readiness fails and SettlerGasLow fires, by slot.',
  labelNames: ['slot'] as const,
  registers: [registry],
})

// ---- Operations: values sampled when Prometheus scrapes, for deploy/alerts.yml. ----------------
// They describe shared state (the database, the chain), so every instance reports the same values: alert
// rules take max() across instances, and a parent's sum over its workers takes their max (aggregator).
// Samplers are registered by the modules that can read the value and run before every read of the registry,
// each bounded by a timeout so a slow database or RPC node never makes the scrape itself fail.

/** check: the /readyz check names (database, chain, payouts, …). */
export const readinessCheck = new client.Gauge({
  name: 'tollgate_readiness_check_ok',
  help: '1 when the readiness check answered ok at the last scrape, 0 when it failed or timed out, by check.',
  labelNames: ['check'] as const,
  aggregator: 'min',
  registers: [registry],
})

export const settlementBacklogCount = new client.Gauge({
  name: 'tollgate_x402_settlement_backlog_count',
  help: 'Captured x402 calls whose authorization is not settled on chain yet (sent or not).',
  aggregator: 'max',
  registers: [registry],
})

export const settlementBacklogOldest = new client.Gauge({
  name: 'tollgate_x402_settlement_backlog_oldest_seconds',
  help: 'Age of the oldest captured x402 call not settled on chain yet (0 when none).',
  aggregator: 'max',
  registers: [registry],
})

export const webhookBacklogCount = new client.Gauge({
  name: 'tollgate_webhooks_backlog_count',
  help: 'Webhook deliveries still pending plus events not yet fanned out to their webhooks.',
  aggregator: 'max',
  registers: [registry],
})

export const webhookBacklogOldest = new client.Gauge({
  name: 'tollgate_webhooks_backlog_oldest_seconds',
  help: 'Age of the oldest event not yet delivered to every webhook (0 when none); includes receivers being retried.',
  aggregator: 'max',
  registers: [registry],
})

export const webhookOverdue = new client.Gauge({
  name: 'tollgate_webhooks_overdue_seconds',
  help: 'How far past its next attempt time the most overdue pending delivery is (0 when none): the dispatcher is behind.',
  aggregator: 'max',
  registers: [registry],
})

export const payoutsOpenOldest = new client.Gauge({
  name: 'tollgate_payouts_open_oldest_seconds',
  help: 'Age of the oldest payout recorded or broadcast but not confirmed or failed (0 when none).',
  aggregator: 'max',
  registers: [registry],
})

export const payoutsOwedAtomic = new client.Gauge({
  name: 'tollgate_payouts_owed_atomic',
  help: 'USDC base units owed to owner wallets and refund recipients and not yet in a payout.',
  aggregator: 'max',
  registers: [registry],
})

export const treasuryUsdcAtomic = new client.Gauge({
  name: 'tollgate_treasury_usdc_atomic',
  help: 'USDC base units the treasury holds (read from the chain at scrape).',
  aggregator: 'max',
  registers: [registry],
})

export const treasuryGasWei = new client.Gauge({
  name: 'tollgate_treasury_gas_wei',
  help: 'Native currency (wei) the treasury holds for gas (read from the chain at scrape; float precision).',
  aggregator: 'max',
  registers: [registry],
})

/** kind: vacuum (VACUUM (ANALYZE)) | analyze. Only the embedded database, which has no autovacuum. */
export const embeddedMaintenance = new client.Counter({
  name: 'tollgate_embedded_maintenance_total',
  help: 'Tables the embedded database job vacuumed or analyzed (where a server would have run autovacuum).',
  labelNames: ['kind'] as const,
  registers: [registry],
})

/** outcome: paid (completed the payment) | partial | refund_scheduled | proof_already_used | not_found. */
export const checkoutPayments = new client.Counter({
  name: 'tollgate_checkout_payments_total',
  help: 'Proofs presented to a checkout payment (POST /pay/:id), by outcome.',
  labelNames: ['outcome'] as const,
  registers: [registry],
})

type ScrapeSampler = () => Promise<void>
const scrapeSamplers = new Set<ScrapeSampler>()

/** Registers a sampler run before each scrape; returns its removal. */
export function onScrape(sampler: ScrapeSampler): () => void {
  scrapeSamplers.add(sampler)
  return () => {
    scrapeSamplers.delete(sampler)
  }
}

/** Runs every sampler at once; one that fails or passes timeoutMs keeps its gauges' previous values. */
async function runScrapeSamplers(timeoutMs: number): Promise<void> {
  await Promise.all(
    [...scrapeSamplers].map((sample) => {
      let timer: NodeJS.Timeout | undefined
      const timeout = new Promise<void>((resolve) => {
        timer = setTimeout(resolve, timeoutMs)
      })
      return Promise.race([sample().catch(() => {}), timeout]).finally(() => clearTimeout(timer))
    }),
  )
}
