// /pay/:payment_id (issue 4): placeholder until the checkout lands; returning undefined leaves it unmounted.
import type { Sql } from '../db/sql.ts'
import type { Logger } from '../observability/logger.ts'
import type { UwsRoute } from './app.ts'
import type { ChallengeChain } from './challenge.ts'
import type { Verifier } from './verifier.ts'

export interface CheckoutDeps {
  sql: Sql
  verifier: Verifier
  chain: ChallengeChain & { explorerUrl: string | null }
  publicUrl(): string
  logger: Logger
  settings: {
    ownerShareBps: number
    quoteTtlMs: number
    bodyLimitBytes: number
  }
}

export function createCheckoutRoute(_deps: CheckoutDeps): UwsRoute | undefined {
  return undefined
}
