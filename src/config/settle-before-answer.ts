// Whether this process can settle x402 `exact` authorizations before their answers: it needs the settler key
// (its nonces are this process's alone) and one data-plane process (several would assign the same nonces).
// Asked by the API (an endpoint asking for it is refused where it cannot be done) and by the exact scheme.
import type { Config } from './schema.ts'

/** Why this process cannot settle before the answer; null: it can. */
export function settleBeforeAnswerUnavailable(config: Pick<Config, 'secrets' | 'server'>): string | null {
  if ((config.secrets?.settler_private_key ?? null) === null)
    return 'no SETTLER_PRIVATE_KEY is configured (an account holding gas, not the treasury)'
  if (config.server.workers !== 1)
    return `server.workers is ${config.server.workers}; settling before the answer needs 1 (one settler key per process)`
  return null
}
