// Bounded history: the leader prunes what no longer needs keeping, a batch at a time (config `retention`):
// idempotency keys after 24 h, finished webhook deliveries (with their attempts) and dispatched events after
// their retention, claims once their proof is too old to be accepted (src/books/retention.ts says why that
// keeps a proof paying once). Calls, ledger entries and payouts are kept: they are the owner's history.
import { pruneClaims } from '../../books/retention.ts'
import { pruneEvents, pruneIdempotencyKeys, pruneWebhookDeliveries } from '../../db/retention.ts'
import type { BackgroundModule, JobDeps } from './runner.ts'

export interface Pruned {
  idempotency_keys: number
  webhook_deliveries: number
  events: number
  claims: number
}

/** Repeats a batched delete while it comes back full, at most `max` times. */
async function drain(max: number, batch: number, once: () => Promise<number>): Promise<number> {
  let total = 0
  for (let i = 0; i < max; i++) {
    const n = await once()
    total += n
    if (n < batch) break
  }
  return total
}

export async function pruneHistory(deps: Pick<JobDeps, 'sql' | 'config'>): Promise<Pruned> {
  const { sql, config } = deps
  const r = config.retention
  const batch = r.batch_rows
  return {
    idempotency_keys: await drain(r.max_batches, batch, () => pruneIdempotencyKeys(sql, { batch })),
    // Deliveries before events: an event goes only once no delivery refers to it.
    webhook_deliveries: await drain(r.max_batches, batch, () =>
      pruneWebhookDeliveries(sql, { olderThanMs: r.webhooks_ms, batch }),
    ),
    events: await drain(r.max_batches, batch, () => pruneEvents(sql, { olderThanMs: r.events_ms, batch })),
    claims: await drain(r.max_batches, batch, () =>
      // The oldest proof the verifier still accepts: a transaction up to max_proof_age_ms old, an x402
      // authorization until its validBefore (checked row by row; max_timeout_seconds bounds the scan).
      pruneClaims(sql, {
        txOlderThanMs: config.chain.max_proof_age_ms + r.claims_margin_ms,
        authOlderThanMs: config.x402.max_timeout_seconds * 1000 + r.claims_margin_ms,
        marginS: Math.ceil(r.claims_margin_ms / 1000),
        batch,
      }),
    ),
  }
}

export function createRetentionJobs(deps: JobDeps): BackgroundModule {
  return {
    jobs: [
      {
        name: 'retention',
        intervalMs: deps.config.retention.interval_ms,
        run: async () => {
          const pruned = await pruneHistory(deps)
          if (Object.values(pruned).some((n) => n > 0)) deps.logger.info('history pruned', { ...pruned })
          return pruned
        },
      },
    ],
  }
}
