// Whether this service can settle x402 `exact` authorizations before their answers: it needs a secret to
// derive its settler keys from (SETTLER_PRIVATE_KEY, else the treasury key, which every network but the local
// dev chain requires). Workers and instances each own a settler slot (src/db/settler-slots.ts), so neither
// shape is refused. Asked by the API (an endpoint asking for it is refused where it cannot be done).
import type { Config } from './schema.ts'

/** Why this service cannot settle before the answer; null: it can. */
export function settleBeforeAnswerUnavailable(config: Pick<Config, 'secrets' | 'chain'>): string | null {
  const seeded =
    (config.secrets?.settler_private_key ?? null) !== null ||
    (config.secrets?.treasury_private_key ?? null) !== null ||
    config.chain?.network === 'local'
  if (!seeded) return 'no SETTLER_PRIVATE_KEY nor treasury key to derive the settler keys from'
  return null
}
