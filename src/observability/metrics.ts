// Every metric the service exports, declared once: tollgate_<subsystem>_<name>_<unit>, bounded labels only.
import client from 'prom-client'

export const registry = new client.Registry()
client.collectDefaultMetrics({ register: registry, prefix: 'tollgate_' })

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

export const verifications = new client.Counter({
  name: 'tollgate_verify_outcomes_total',
  help: 'Proof verifications by proof kind, source (cache/rpc) and outcome.',
  labelNames: ['kind', 'source', 'outcome'] as const,
  registers: [registry],
})

export const rpcDuration = new client.Histogram({
  name: 'tollgate_chain_rpc_duration_seconds',
  help: 'Latency of proof verification RPC look-ups.',
  buckets: LATENCY_BUCKETS,
  registers: [registry],
})

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

export const booksWrites = new client.Counter({
  name: 'tollgate_books_writes_total',
  help: 'Claim/capture statements written (one commit each): claims and captures share them under load.',
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

export const capturedAtomic = new client.Counter({
  name: 'tollgate_calls_captured_atomic_total',
  help: 'USDC base units captured from metered calls.',
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
  registers: [registry],
})

export const settlements = new client.Counter({
  name: 'tollgate_x402_settlements_total',
  help: 'x402 authorizations settled on chain, by outcome (settled, reverted, expired).',
  labelNames: ['outcome'] as const,
  registers: [registry],
})
