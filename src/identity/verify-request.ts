// Who is calling: checks a request's RFC 9421 signature (Web Bot Auth profile) against the keys the operator
// allows. Every outcome is a value; a signature that fails is reported with a snake_case reason and the
// caller decides (rules treat it as unsigned unless they block).
import type { KeyObject } from 'node:crypto'
import { ALGORITHMS, type Algorithm, keyFits, verifyWith } from './algorithms.ts'
import type { KeyDirectories } from './key-directories.ts'
import { buildSignatureBase, type MessageView } from './signature-base.ts'
import { type InnerList, isInnerList, type Member, parseDictionary } from './structured-fields.ts'

export const WEB_BOT_AUTH_TAG = 'web-bot-auth'

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
    }
  | { status: 'failed'; reason: IdentityFailure }

export interface VerifierPolicy {
  /** Longest `expires - created` accepted (the draft recommends at most 24 h). */
  maxLifetimeS: number
  /** Clock difference tolerated on `created` and `expires`. */
  clockSkewS: number
  /** Hosts this service answers as; empty: any (the Host the request carries is what is checked). */
  authorities: readonly string[]
}

export interface IdentityVerifierDeps {
  directories: KeyDirectories | null
  keys: ReadonlyMap<string, ConfiguredKey>
  claimNonce: (q: { key: string; expiresAtMs: number }) => Promise<boolean>
  policy: VerifierPolicy
  now?: () => number
}

const fail = (reason: IdentityFailure): Identity => ({ status: 'failed', reason })
const MAX_NONCE_CHARS = 256

/** Headers the verifier reads; the stage checks `signature-input` presence before anything else. */
export async function verifyRequest(deps: IdentityVerifierDeps, msg: MessageView): Promise<Identity> {
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

  const covered = new Set(input.items.map((i) => i.value))
  // The signature must say which host it was made for, or it could be replayed at any service.
  if (!covered.has('@authority') && !covered.has('@target-uri')) return fail('authority_not_covered')
  if (authorities.length > 0 && !authorities.includes(msg.authority)) return fail('wrong_authority')

  const resolved = resolveKey(deps, msg, input, keyid)
  if ('reason' in resolved) return fail(resolved.reason)
  if (alg !== undefined && alg !== resolved.alg) return fail('unsupported_algorithm')
  if (!keyFits(resolved.alg, resolved.key)) return fail('unsupported_algorithm')

  const base = buildSignatureBase(msg, input)
  if (!base.ok) return fail(base.reason)
  if (!verifyWith(resolved.alg, resolved.key, base.base, sig.value)) return fail('bad_signature')

  // Last, and only for a valid signature: a forged one must not burn the agent's nonce.
  let fresh: boolean
  try {
    fresh = await deps.claimNonce({
      key: `${resolved.agent ?? ''}|${keyid}|${nonce}`,
      expiresAtMs: (expires + clockSkewS) * 1000,
    })
  } catch {
    return fail('nonce_store_unavailable')
  }
  if (!fresh) return fail('replayed_nonce')
  return { status: 'verified', signer: resolved.signer, keyid, agent: resolved.agent, alg: resolved.alg }
}

/** The Web Bot Auth signature if there is one, else one made with a key the operator configured. */
function pickSignature(deps: IdentityVerifierDeps, inputs: Map<string, Member>): [string, InnerList] | null {
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

function resolveKey(deps: IdentityVerifierDeps, msg: MessageView, input: InnerList, keyid: string): Resolved {
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
