// Identity rules as the endpoints table keeps them (jsonb) and as the API shows them. Amounts are kept in
// base units and basis points, as text where they are bigints, so a stored rule never goes through a float.
import { toDollars } from '../money.ts'
import type { IdentityRule, RuleAction } from './rules.ts'

export interface StoredIdentityRule {
  match: IdentityRule['match']
  signer?: string
  keyid?: string
  action: RuleAction['kind']
  multiplier_bps?: number
  price_atomic?: string
}

export function rulesToStored(rules: readonly IdentityRule[]): StoredIdentityRule[] {
  return rules.map((r) => {
    const a = r.action
    return {
      match: r.match,
      ...(r.match === 'signer' ? { signer: r.signer } : {}),
      ...(r.match === 'keyid' ? { keyid: r.keyid } : {}),
      action: a.kind,
      ...(a.kind === 'multiplier' ? { multiplier_bps: a.bps } : {}),
      ...(a.kind === 'price' ? { price_atomic: a.atomic.toString() } : {}),
    }
  })
}

export function rulesFromStored(stored: readonly StoredIdentityRule[]): IdentityRule[] {
  return stored.map((s) => {
    const action: RuleAction =
      s.action === 'multiplier'
        ? { kind: 'multiplier', bps: s.multiplier_bps! }
        : s.action === 'price'
          ? { kind: 'price', atomic: BigInt(s.price_atomic!) }
          : { kind: s.action }
    if (s.match === 'signer') return { match: 'signer', signer: s.signer!, action }
    if (s.match === 'keyid') return { match: 'keyid', keyid: s.keyid!, action }
    return { match: s.match, action }
  })
}

/** The API's form: what the owner sent, amounts normalised (price in dollars, multiplier as a decimal). */
export interface PresentedIdentityRule {
  match: IdentityRule['match']
  signer?: string
  keyid?: string
  action: RuleAction['kind']
  multiplier?: string
  price?: number
}

export function presentRules(rules: readonly IdentityRule[]): PresentedIdentityRule[] {
  return rules.map((r) => {
    const a = r.action
    return {
      match: r.match,
      ...(r.match === 'signer' ? { signer: r.signer } : {}),
      ...(r.match === 'keyid' ? { keyid: r.keyid } : {}),
      action: a.kind,
      ...(a.kind === 'multiplier' ? { multiplier: bpsText(a.bps) } : {}),
      ...(a.kind === 'price' ? { price: toDollars(a.atomic) } : {}),
    }
  })
}

function bpsText(bps: number): string {
  const whole = Math.floor(bps / 10_000)
  const frac = String(bps % 10_000)
    .padStart(4, '0')
    .replace(/0+$/, '')
  return frac === '' ? String(whole) : `${whole}.${frac}`
}
