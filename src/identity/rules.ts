// Per-endpoint identity rules: which caller (a named signer, a key id, any verified agent, or nobody verified)
// gets which price. Validated once at the API boundary; applied with integer math on base units.
import * as v from 'valibot'
import { parseDollars, scaleByBps } from '../money.ts'
import type { Identity } from './verify-request.ts'

const MAX_RULES = 16
const MAX_MULTIPLIER_BPS = 1_000_000 // ×100
const MULTIPLIER = /^(0|[1-9]\d{0,2})(?:\.(\d{1,4}))?$/

const Match = v.picklist(
  ['signer', 'keyid', 'any_verified', 'unsigned', 'invalid_signature'],
  'must be "signer", "keyid", "any_verified", "unsigned" or "invalid_signature"',
)
const Action = v.picklist(
  ['free', 'multiplier', 'price', 'block', 'endpoint_price'],
  'must be "free", "multiplier", "price", "block" or "endpoint_price"',
)

export const IdentityRuleInput = v.pipe(
  v.strictObject({
    match: Match,
    /** match signer: the operator's name for a directory or configured key (config identity.*). */
    signer: v.optional(v.pipe(v.string('must be a string'), v.minLength(1), v.maxLength(100))),
    /** match keyid: the key's id (a directory key's JWK thumbprint). */
    keyid: v.optional(v.pipe(v.string('must be a string'), v.minLength(1), v.maxLength(256))),
    action: Action,
    /** action multiplier: the endpoint's price × this (at most 4 decimals, > 0, ≤ 100). */
    multiplier: v.optional(v.union([v.number(), v.string()], 'must be a number or decimal string')),
    /** action price: this fixed price instead (dollars). */
    price: v.optional(v.union([v.number(), v.string()], 'must be a number or decimal string')),
  }),
  v.check(
    (r) => (r.match === 'signer') === (r.signer !== undefined),
    'signer is required with (only with) match "signer"',
  ),
  v.check(
    (r) => (r.match === 'keyid') === (r.keyid !== undefined),
    'keyid is required with (only with) match "keyid"',
  ),
  // Only a rule can refuse a failed signature; any other treatment of it is the unsigned rules'.
  v.check(
    (r) => r.match !== 'invalid_signature' || r.action === 'block',
    'match "invalid_signature" takes action "block"',
  ),
  v.check(
    (r) =>
      (r.action === 'multiplier') === (r.multiplier !== undefined) && multiplierBps(r.multiplier) !== null,
    'multiplier is required with (only with) action "multiplier": a decimal > 0 and ≤ 100, at most 4 decimals',
  ),
  v.check(
    (r) =>
      (r.action === 'price') === (r.price !== undefined) &&
      (r.price === undefined || parseDollars(r.price).ok),
    'price is required with (only with) action "price": a dollar amount > 0 with at most 6 decimals',
  ),
)
export const IdentityRulesInput = v.pipe(
  v.array(IdentityRuleInput, 'must be an array of rules'),
  v.maxLength(MAX_RULES, `at most ${MAX_RULES} rules`),
)
export type IdentityRuleInput = v.InferOutput<typeof IdentityRuleInput>

/** A rule as stored and applied: amounts already in base units and basis points. */
export type IdentityRule =
  | { match: 'signer'; signer: string; action: RuleAction }
  | { match: 'keyid'; keyid: string; action: RuleAction }
  | { match: 'any_verified' | 'unsigned' | 'invalid_signature'; action: RuleAction }

export type RuleAction =
  | { kind: 'free' }
  | { kind: 'block' }
  | { kind: 'endpoint_price' }
  | { kind: 'multiplier'; bps: number }
  | { kind: 'price'; atomic: bigint }

/** null when the text is not a multiplier we accept (undefined: none given, which is valid). */
function multiplierBps(m: number | string | undefined): number | null | 0 {
  if (m === undefined) return 0
  const match = MULTIPLIER.exec(typeof m === 'number' ? String(m) : m.trim())
  if (match === null) return null
  const bps = Number(match[1]) * 10_000 + Number((match[2] ?? '').padEnd(4, '0'))
  return bps > 0 && bps <= MAX_MULTIPLIER_BPS ? bps : null
}

/** Input (already validated) → stored form. */
export function toRule(input: IdentityRuleInput): IdentityRule {
  const action: RuleAction =
    input.action === 'multiplier'
      ? { kind: 'multiplier', bps: multiplierBps(input.multiplier) as number }
      : input.action === 'price'
        ? { kind: 'price', atomic: (parseDollars(input.price) as { atomic: bigint }).atomic }
        : { kind: input.action }
  if (input.match === 'signer') return { match: 'signer', signer: input.signer!, action }
  if (input.match === 'keyid') return { match: 'keyid', keyid: input.keyid!, action }
  return { match: input.match, action }
}

export type Decision =
  | { kind: 'block'; rule: number }
  /** What this call costs; 0n is a free call (forwarded without payment). rule -1: no rule matched. */
  | { kind: 'priced'; atomic: bigint; rule: number; action: RuleAction['kind'] }

/**
 * The first rule that matches decides. A failed signature matches invalid_signature (block) and otherwise
 * counts as unsigned, so a broken signer is never priced as a verified one. `measured`: the price is a
 * usage ceiling (an MCP tool priced by usage), charged what it measures, so a rule that states a price
 * keeps the endpoint's (HTTP endpoints priced by usage refuse such rules when they are set).
 */
export function decide(
  rules: readonly IdentityRule[],
  identity: Identity,
  endpointAtomic: bigint,
  measured = false,
): Decision {
  for (let i = 0; i < rules.length; i++) {
    const rule = rules[i]!
    if (!matches(rule, identity)) continue
    const a = rule.action
    switch (a.kind) {
      case 'block':
        return { kind: 'block', rule: i }
      case 'free':
        return { kind: 'priced', atomic: 0n, rule: i, action: 'free' }
      case 'price':
        if (measured) return { kind: 'priced', atomic: endpointAtomic, rule: i, action: 'endpoint_price' }
        return { kind: 'priced', atomic: a.atomic, rule: i, action: 'price' }
      case 'multiplier':
        if (measured) return { kind: 'priced', atomic: endpointAtomic, rule: i, action: 'endpoint_price' }
        return { kind: 'priced', atomic: scaleByBps(endpointAtomic, a.bps), rule: i, action: 'multiplier' }
      case 'endpoint_price':
        return { kind: 'priced', atomic: endpointAtomic, rule: i, action: 'endpoint_price' }
    }
  }
  return { kind: 'priced', atomic: endpointAtomic, rule: -1, action: 'endpoint_price' }
}

function matches(rule: IdentityRule, identity: Identity): boolean {
  switch (rule.match) {
    case 'signer':
      return identity.status === 'verified' && identity.signer === rule.signer
    case 'keyid':
      return identity.status === 'verified' && identity.keyid === rule.keyid
    case 'any_verified':
      return identity.status === 'verified'
    case 'unsigned':
      return identity.status !== 'verified'
    case 'invalid_signature':
      return identity.status === 'failed'
  }
}
