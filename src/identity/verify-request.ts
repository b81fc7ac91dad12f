// Who is calling: checks a request's RFC 9421 signature (Web Bot Auth profile) against the keys the operator
// allows. Every outcome is a value; a signature that fails is reported with a snake_case reason and the
// caller decides (rules treat it as unsigned unless they block).
import type { KeyObject } from 'node:crypto'
import { ALGORITHMS, type Algorithm, keyFits, verifyWith } from './algorithms.ts'
import type { KeyDirectories } from './key-directories.ts'
import { buildSignatureBase, type MessageView } from './signature-base.ts'
import { type InnerList, isInnerList, type Member, parseDictionary } from './structured-fields.ts'

export const WEB_BOT_AUTH_TAG = 'web-bot-auth'
/** Visa Trusted Agent Protocol's tags (the interaction a signature is for) and its longest lifetime. */
export const TAP_TAGS = { browse: 'agent-browser-auth', payment: 'agent-payer-auth' } as const
export type TapPurpose = keyof typeof TAP_TAGS
const TAP_MAX_LIFETIME_S = 8 * 60

function tapPurpose(tag: unknown): TapPurpose | null {
  if (tag === TAP_TAGS.payment) return 'payment'
  if (tag === TAP_TAGS.browse) return 'browse'
  return null
}

export interface ConfiguredKey {
  /** The operator's name for this signer. */
  name: string
  keyid: string
  alg: Algorithm
  key: KeyObject
}

export type IdentityFailure =
  | 'malformed_signature'
  | 'no_usable_signature'
  | 'missing_parameter'
  | 'unsupported_algorithm'
  | 'missing_component'
  | 'unsupported_component'
  | 'authority_not_covered'
  | 'signature_agent_not_covered'
  | 'wrong_authority'
  | 'not_yet_valid'
  | 'expired'
  | 'lifetime_too_long'
  | 'directory_not_allowed'
  | 'directory_unavailable'
  | 'unknown_key'
  | 'bad_signature'
  | 'replayed_nonce'
  | 'nonce_store_unavailable'
  | 'tap_binding_not_covered'
  | 'wrong_purpose'

export type Identity =
  | { status: 'unsigned' }
  | {
      status: 'verified'
      /** The operator's name for the directory or configured key. */
      signer: string
      keyid: string
      /** The Signature-Agent origin, when the key came from a directory. */
      agent: string | null
      alg: Algorithm
      /** Visa TAP's interaction type, from its tag; null for a signature that is not TAP's. */
      purpose: TapPurpose | null
      /** The replay key, claimed (claimIdentityNonce) only when the call is to serve something. */
      nonce: NonceClaim
    }
  | { status: 'failed'; reason: IdentityFailure }

export interface NonceClaim {
  key: string
  expiresAtMs: number
}

export interface VerifierPolicy {
  /** Longest `expires - created` accepted (the draft recommends at most 24 h). */
  maxLifetimeS: number
  /** Clock difference tolerated on `created` and `expires`. */
  clockSkewS: number
  /** Hosts this service answers as; empty: any (the Host the request carries is what is checked). */
  authorities: readonly string[]
}

/** What the signature check reads: keys, directories, the time rules (no database). */
export type VerifierKeys = Omit<IdentityVerifierDeps, 'claimNonce'>

export interface IdentityVerifierDeps {
  directories: KeyDirectories | null
  keys: ReadonlyMap<string, ConfiguredKey>
  claimNonce: (q: NonceClaim) => Promise<boolean>
  policy: VerifierPolicy
  now?: () => number
}

const fail = (reason: IdentityFailure): Identity => ({ status: 'failed', reason })
const MAX_NONCE_CHARS = 256

/** checkSignature, then the nonce claimed at once: the whole check, for a caller that serves every call. */
export async function verifyRequest(deps: IdentityVerifierDeps, msg: MessageView): Promise<Identity> {
  return claimIdentityNonce(deps.claimNonce, checkSignature(deps, msg))
}

/**
 * Claims a verified signature's nonce, once across every instance on the database until it expires; any
 * other outcome is returned as it is. A forged signature never reaches this, so never burns a nonce.
 */
export async function claimIdentityNonce(
  claim: (q: NonceClaim) => Promise<boolean>,
  identity: Identity,
): Promise<Identity> {
  if (identity.status !== 'verified') return identity
  let fresh: boolean
  try {
    fresh = await claim(identity.nonce)
  } catch {
    return fail('nonce_store_unavailable')
  }
  return fresh ? identity : fail('replayed_nonce')
}

/**
 * Every check but the nonce's (synchronous, no I/O): parse, time window, authority, key from the cache,
 * signature base, signature. A verified result carries the nonce to claim before anything is served.
 */
export function checkSignature(deps: VerifierKeys, msg: MessageView): Identity {
  const inputRaw = msg.header('signature-input')
  const sigRaw = msg.header('signature')
  if (inputRaw === undefined && sigRaw === undefined) return { status: 'unsigned' }
  if (inputRaw === undefined || sigRaw === undefined) return fail('malformed_signature')
  const inputs = parseDictionary(inputRaw)
  const signatures = parseDictionary(sigRaw)
  if (inputs === null || signatures === null) return fail('malformed_signature')

  const chosen = pickSignature(deps, inputs)
  if (chosen === null) return fail('no_usable_signature')
  const [label, input] = chosen
  const sig = signatures.get(label)
  if (sig === undefined || isInnerList(sig) || !(sig.value instanceof Uint8Array))
    return fail('malformed_signature')

  const p = input.params
  const keyid = p.get('keyid')
  const created = p.get('created')
  const expires = p.get('expires')
  const nonce = p.get('nonce')
  const alg = p.get('alg')
  const purpose = tapPurpose(p.get('tag'))
  if (typeof keyid !== 'string' || typeof created !== 'number' || typeof expires !== 'number') {
    return fail('missing_parameter')
  }
  if (typeof nonce !== 'string' || nonce.length === 0 || nonce.length > MAX_NONCE_CHARS)
    return fail('missing_parameter')
  if (alg !== undefined && (typeof alg !== 'string' || !(ALGORITHMS as readonly string[]).includes(alg))) {
    return fail('unsupported_algorithm')
  }

  const { maxLifetimeS, clockSkewS, authorities } = deps.policy
  const nowS = Math.floor((deps.now?.() ?? Date.now()) / 1000)
  if (created > nowS + clockSkewS) return fail('not_yet_valid')
  if (expires <= nowS - clockSkewS) return fail('expired')
  if (expires - created > maxLifetimeS || expires <= created) return fail('lifetime_too_long')
  if (purpose !== null && expires - created > TAP_MAX_LIFETIME_S) return fail('lifetime_too_long')

  const covered = new Set(input.items.map((i) => i.value))
  // The signature must say which host it was made for, or it could be replayed at any service.
  if (!covered.has('@authority') && !covered.has('@target-uri')) return fail('authority_not_covered')
  // TAP binds a signature to the merchant and the operation: both @authority and @path are signed.
  if (purpose !== null && !(covered.has('@authority') && covered.has('@path')))
    return fail('tap_binding_not_covered')
  if (authorities.length > 0 && !authorities.includes(msg.authority)) return fail('wrong_authority')

  const resolved = resolveKey(deps, msg, input, keyid)
  if ('reason' in resolved) return fail(resolved.reason)
  if (alg !== undefined && alg !== resolved.alg) return fail('unsupported_algorithm')
  if (!keyFits(resolved.alg, resolved.key)) return fail('unsupported_algorithm')

  const base = buildSignatureBase(msg, input)
  if (!base.ok) return fail(base.reason)
  if (!verifyWith(resolved.alg, resolved.key, base.base, sig.value)) return fail('bad_signature')

  return {
    status: 'verified',
    signer: resolved.signer,
    keyid,
    agent: resolved.agent,
    alg: resolved.alg,
    purpose,
    nonce: { key: `${resolved.agent ?? ''}|${keyid}|${nonce}`, expiresAtMs: (expires + clockSkewS) * 1000 },
  }
}

/**
 * Visa TAP: a signature tagged `agent-payer-auth` may pay; one tagged `agent-browser-auth` only browses, so
 * on a call that carries a payment it is `wrong_purpose` (and priced as unsigned).
 */
export function forPayment(identity: Identity): Identity {
  return identity.status === 'verified' && identity.purpose === 'browse' ? fail('wrong_purpose') : identity
}

/** The Web Bot Auth signature if there is one, else one made with a key the operator configured. */
function pickSignature(deps: VerifierKeys, inputs: Map<string, Member>): [string, InnerList] | null {
  let fallback: [string, InnerList] | null = null
  for (const [label, m] of inputs) {
    if (!isInnerList(m)) continue
    if (m.params.get('tag') === WEB_BOT_AUTH_TAG) return [label, m]
    const keyid = m.params.get('keyid')
    if (fallback === null && typeof keyid === 'string' && deps.keys.has(keyid)) fallback = [label, m]
  }
  return fallback
}

type Resolved =
  | { signer: string; agent: string | null; alg: Algorithm; key: KeyObject }
  | { reason: IdentityFailure }

function resolveKey(deps: VerifierKeys, msg: MessageView, input: InnerList, keyid: string): Resolved {
  const agentRaw = msg.header('signature-agent')
  if (agentRaw === undefined) {
    const configured = deps.keys.get(keyid)
    if (configured === undefined) return { reason: 'unknown_key' }
    return { signer: configured.name, agent: null, alg: configured.alg, key: configured.key }
  }
  // The directory is named by the agent, so the agent must have signed that name.
  const agentComponent = input.items.find((i) => i.value === 'signature-agent')
  if (agentComponent === undefined) return { reason: 'signature_agent_not_covered' }
  const agent = signatureAgentOrigin(agentRaw, agentComponent.params.get('key'))
  if (agent === null) return { reason: 'malformed_signature' }
  if (deps.directories === null) return { reason: 'directory_not_allowed' }
  const found = deps.directories.lookup(agent, keyid)
  if (found.status !== 'found') return { reason: found.status }
  return { signer: found.directory.name, agent, alg: found.key.alg, key: found.key.key }
}

/**
 * Signature-Agent is a dictionary whose member (named by the component's `key` parameter) is the directory
 * URL; earlier drafts sent a bare string, accepted when the component has no `key`.
 */
function signatureAgentOrigin(raw: string, key: unknown): string | null {
  // An agent sends the same header on every request: its origin is remembered (parsing a URL is dearer
  // than the rest of the header checks). Bounded, so a caller varying it cannot grow it.
  const memoKey = typeof key === 'string' ? `${key}\n${raw}` : raw
  const known = originMemo.get(memoKey)
  if (known !== undefined) return known
  const origin = readSignatureAgent(raw, key)
  if (originMemo.size >= ORIGIN_MEMO_MAX) originMemo.clear()
  originMemo.set(memoKey, origin)
  return origin
}

const originMemo = new Map<string, string | null>()
const ORIGIN_MEMO_MAX = 1024

function readSignatureAgent(raw: string, key: unknown): string | null {
  let value: unknown
  if (typeof key === 'string') {
    const member = parseDictionary(raw)?.get(key)
    if (member === undefined || isInnerList(member)) return null
    value = member.value
  } else {
    const m = /^\s*"([^"\\]*)"\s*$/.exec(raw)
    value = m?.[1]
  }
  if (typeof value !== 'string') return null
  try {
    const url = new URL(value)
    return url.protocol === 'https:' || url.protocol === 'http:' ? url.origin : null
  } catch {
    return null
  }
}
