// The ways to pay, in the order they read a payment header: the specific ones first, `exact` last (it
// reads every x402 payload the others leave, and refuses the ones it cannot pay). A new scheme is a
// folder beside these and one line here.
import { batchSettlementScheme } from './batch-settlement/index.ts'
import { exactScheme } from './exact/index.ts'
import { mppChargeScheme } from './mpp-charge/index.ts'
import type { SchemeFactory } from './scheme.ts'
import { txHashScheme } from './tx-hash/index.ts'
import { uptoScheme } from './upto/index.ts'

const SCHEMES: SchemeFactory[] = [
  txHashScheme,
  mppChargeScheme,
  batchSettlementScheme,
  uptoScheme,
  exactScheme,
]

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
