// Bounded history: the leader prunes what no longer needs keeping, a batch at a time (config `retention`):
// idempotency keys after 24 h, finished webhook deliveries (with their attempts) and dispatched events after
// their retention, claims once their proof is older than a stored horizon every verifier refuses (with the
// unmatched inflows they resolved), settled voucher calls below their channel's charged total
// (src/books/retention.ts says why each keeps a proof paying once). Calls, ledger entries and payouts are
// kept: they are the owner's history.
import { dropClaimDays, pruneClaims } from '../../books/retention.ts'
import { advanceHorizon, horizonPropagationMs } from '../../db/proof-horizons.ts'
import {
  pruneEvents,
  pruneIdempotencyKeys,
  pruneSignInNonces,
  pruneWebhookDeliveries,
} from '../../db/retention.ts'
import type { BackgroundModule, JobDeps } from './runner.ts'

export interface Pruned {
  /** Day partitions of claims dropped whole, and those below the horizons kept for a claim still open. */
  claim_days_dropped: string[]
  claim_days_held: string[]
  idempotency_keys: number
  webhook_deliveries: number
  events: number
  claims: number
  unmatched_inflows: number
  sign_in_nonces: number
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

/**
 * Announces this run's horizons (the oldest proof the configuration still accepts, less the margin) and
 * answers what may be deleted now: the horizons announced at least one propagation delay ago, so every
 * verifier's cached copy refuses those proofs before their claims go.
 */
async function claimHorizons(
  deps: Pick<JobDeps, 'sql' | 'config'>,
  propagationMs: number,
  nowMs: number,
): Promise<{ tx: number | null; auth: number | null }> {
  const { sql, config } = deps
  const margin = config.retention.claims_margin_ms
  // A transaction up to max_proof_age_ms old is accepted (block time); an authorization until its validBefore.
  const txAge = config.chain.max_proof_age_ms + margin
  const tx = await advanceHorizon(sql, { kind: 'tx', cutoffMs: nowMs - txAge, ageMs: txAge, propagationMs })
  const auth = await advanceHorizon(sql, {
    kind: 'eip3009',
    cutoffMs: nowMs - margin,
    ageMs: margin,
    propagationMs,
  })
  return { tx, auth }
}

export async function pruneHistory(
  deps: Pick<JobDeps, 'sql' | 'config'>,
  /** Tests only: 0 deletes below a horizon in the run that announces it (one process, no other cache). */
  options: { propagationMs?: number; nowMs?: number } = {},
): Promise<Pruned> {
  const { sql, config } = deps
  const r = config.retention
  const batch = r.batch_rows
  const horizons = await claimHorizons(
    deps,
    options.propagationMs ?? horizonPropagationMs(r.horizon_refresh_ms),
    options.nowMs ?? Date.now(),
  )
  // Whole days first: what is left below the horizons afterwards (vouchers, the default partition, a day held
  // by a claim still open) goes row by row.
  const days = await dropClaimDays(sql, {
    txPrunableBeforeMs: horizons.tx,
    authPrunableBeforeMs: horizons.auth,
  })
  let unmatchedInflows = days.inflows
  return {
    claim_days_dropped: days.dropped,
    claim_days_held: days.held,
    idempotency_keys: await drain(r.max_batches, batch, () => pruneIdempotencyKeys(sql, { batch })),
    // Deliveries before events: an event goes only once no delivery refers to it.
    webhook_deliveries: await drain(r.max_batches, batch, () =>
      pruneWebhookDeliveries(sql, { olderThanMs: r.webhooks_ms, batch }),
    ),
    events: await drain(r.max_batches, batch, () => pruneEvents(sql, { olderThanMs: r.events_ms, batch })),
    claims: await drain(r.max_batches, batch, async () => {
      // Below the stored horizons only; the claim-time bounds keep the scan to old rows (an authorization
      // is claimed at most max_timeout_seconds before its validBefore).
      const pruned = await pruneClaims(sql, {
        txOlderThanMs: config.chain.max_proof_age_ms + r.claims_margin_ms,
        txPrunableBeforeMs: horizons.tx,
        authOlderThanMs: config.x402.max_timeout_seconds * 1000 + r.claims_margin_ms,
        authPrunableBeforeMs: horizons.auth,
        voucherSettledMs: r.voucher_claims_ms,
        batch,
      })
      unmatchedInflows += pruned.inflows
      return pruned.claims
    }),
    // (Read after the claims above: an object literal's values are evaluated in order.)
    unmatched_inflows: unmatchedInflows,
    sign_in_nonces: await drain(r.max_batches, batch, () => pruneSignInNonces(sql, { batch })),
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
          const any = Object.values(pruned).some((n) => (Array.isArray(n) ? n.length > 0 : n > 0))
          if (any) deps.logger.info('history pruned', { ...pruned })
          return pruned
        },
      },
    ],
  }
}
