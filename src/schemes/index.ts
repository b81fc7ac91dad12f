// The ways to pay, in the order they read a payment header: the specific ones first, `exact` last (it
// reads every x402 payload the others leave, and refuses the ones it cannot pay); and the settle sides of
// those collected after the call. A new scheme is a folder beside these and a line here (two, when the
// leader settles it after the call).
import { batchSettlementScheme } from './batch-settlement/index.ts'
import { exactScheme } from './exact/index.ts'
import { exactSettler } from './exact/settle-after.ts'
import { mppChargeScheme } from './mpp-charge/index.ts'
import type { SchemeFactory } from './scheme.ts'
import type { SettlerFactory } from './settler.ts'
import { txHashScheme } from './tx-hash/index.ts'
import { uptoScheme } from './upto/index.ts'
import { uptoSettler } from './upto/settle-after.ts'

const SCHEMES: SchemeFactory[] = [
  txHashScheme,
  mppChargeScheme,
  batchSettlementScheme,
  uptoScheme,
  exactScheme,
]

/** Settled after the call by the leader's pipeline (src/control-plane/jobs/settle-after-call.ts), each its job. */
const SETTLERS: SettlerFactory[] = [exactSettler, uptoSettler]

/** The settle sides the leader runs after the call. */
export function registeredSettlers(): readonly SettlerFactory[] {
  return SETTLERS
}

/** The registered schemes, in reading order. */
export function registeredSchemes(): readonly SchemeFactory[] {
  return SCHEMES
}

/**
 * Registers a scheme ahead of the built-in ones (it reads payments first) for the processes started after
 * this call: the seam's own test uses it; a built-in scheme is a line in SCHEMES instead.
 */
export function registerScheme(factory: SchemeFactory): () => void {
  SCHEMES.unshift(factory)
  return () => {
    const at = SCHEMES.indexOf(factory)
    if (at >= 0) SCHEMES.splice(at, 1)
  }
}
