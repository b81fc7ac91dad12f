// Bearer API-key authentication. Keys carry ≥128 random bits and are stored as SHA-256, so a look-up by
// hash is constant-time with respect to the secret (the index compares digests, not keys) and cheap.
import type { AccountRow } from '../db/accounts.ts'
import { findAccountByKeyHash } from '../db/accounts.ts'
import type { Sql } from '../db/sql.ts'
import { ApiError } from '../errors.ts'
import { API_KEY_FORMAT, hashApiKey } from '../ids.ts'
import type { KeyCache } from './key-cache.ts'

export async function authenticate(
  sql: Sql,
  keys: KeyCache,
  authorization: string | undefined,
): Promise<AccountRow> {
  if (!authorization) {
    throw new ApiError('missing_api_key', 'send your API key as Authorization: Bearer sk_…', undefined, {
      'www-authenticate': 'Bearer',
    })
  }
  const m = /^Bearer\s+(\S+)\s*$/i.exec(authorization)
  // Never echo the presented key back: it may be a real secret sent to the wrong place.
  if (!m || !API_KEY_FORMAT.test(m[1]!)) throw new ApiError('invalid_api_key', 'the API key is not valid')
  const keyHash = hashApiKey(m[1]!)
  const cacheKey = keyHash.toString('base64')
  const cached = keys.get(cacheKey)
  if (cached) return cached
  const readAt = keys.generation
  const found = await findAccountByKeyHash(sql, keyHash)
  if (!found) throw new ApiError('invalid_api_key', 'the API key is not valid')
  keys.set(cacheKey, found.account, found.expiresInMs, readAt)
  return found.account
}
