// The identity settings decided once at start: the allowed directories (a KeyDirectories cache) and the
// keys configured by hand, turned into node:crypto keys so a bad key fails the start, not a request.
import { createPublicKey, createSecretKey } from 'node:crypto'
import type { Config } from '../config/schema.ts'
import { keyFits } from './algorithms.ts'
import { directoryUrl, KeyDirectories } from './key-directories.ts'
import type { ConfiguredKey, VerifierPolicy } from './verify-request.ts'

export interface IdentitySettings {
  directories: KeyDirectories | null
  keys: ReadonlyMap<string, ConfiguredKey>
  policy: VerifierPolicy
  /** The names the operator gave (bounded metric labels). */
  signerNames: readonly string[]
}

export function identityFromConfig(identity: Config['identity']): IdentitySettings {
  const keys = new Map<string, ConfiguredKey>()
  for (const k of identity.keys) {
    const key =
      k.alg === 'hmac-sha256' ? createSecretKey(Buffer.from(k.key, 'base64')) : createPublicKey(k.key)
    if (!keyFits(k.alg, key)) throw new RangeError(`identity.keys: key "${k.name}" is not a ${k.alg} key`)
    keys.set(k.keyid, { name: k.name, keyid: k.keyid, alg: k.alg, key })
  }
  const directories =
    identity.directories.length === 0
      ? null
      : new KeyDirectories(
          {
            allowPrivate: identity.allow_private_directories,
            fetchTimeoutMs: identity.directory_fetch_timeout_ms,
            minTtlMs: identity.directory_min_ttl_ms,
            maxTtlMs: identity.directory_max_ttl_ms,
            defaultTtlMs: identity.directory_default_ttl_ms,
            retryMs: identity.directory_retry_ms,
            maxBytes: identity.directory_max_bytes,
          },
          identity.directories.map((d) => ({
            name: d.name,
            signatureAgent: d.signature_agent,
            url: d.url ?? directoryUrl(d.signature_agent),
          })),
        )
  return {
    directories,
    keys,
    policy: {
      maxLifetimeS: identity.max_lifetime_s,
      clockSkewS: identity.clock_skew_s,
      authorities: identity.authorities.map((a) => a.toLowerCase()),
    },
    signerNames: [...identity.directories.map((d) => d.name), ...identity.keys.map((k) => k.name)],
  }
}
