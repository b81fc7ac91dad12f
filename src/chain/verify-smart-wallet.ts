// Smart-wallet payers (ERC-1271 contract wallets, ERC-6492 wrapped signatures): the signature is checked by
// the wallet itself, through an eth_call: an EIP-3009 authorization's (exact) or a Permit2 permit's (upto).
// Only the fallback after ecrecover did not give `from`, so EOA payers (almost all) never pay for an RPC here.
import {
  type Address,
  BaseError,
  type Client,
  ContractFunctionRevertedError,
  ContractFunctionZeroDataError,
  type Hex,
  hashTypedData,
  isErc6492Signature,
  parseAbi,
  parseErc6492Signature,
} from 'viem'
import { getCode, readContract } from 'viem/actions'
import {
  type AuthorizationTarget,
  authorizationTypedData,
  type TransferAuthorization,
} from './authorization.ts'

export type SmartWalletCheck =
  /** `signature`: what settlement submits (the inner signature of an ERC-6492 wrapper). */
  | { ok: true; signature: Hex }
  | { ok: false; reason: 'invalid_signature' | 'smart_wallet_not_deployed' | 'rpc_unavailable' }

/** The check of one authorization's signature by its payer's wallet, the chain and token bound. */
export type SmartWalletVerifier = (q: {
  authorization: TransferAuthorization
  signature: Hex
}) => Promise<SmartWalletCheck>

/** The verifier of one chain and token, as the data plane's verifier and the facilitator both use it. */
export function smartWalletVerifier(client: Client, target: AuthorizationTarget): SmartWalletVerifier {
  return (q) => verifySmartWalletAuthorization(client, { ...target, ...q })
}

const erc1271 = parseAbi(['function isValidSignature(bytes32 hash, bytes signature) view returns (bytes4)'])
/** What isValidSignature answers for a signature the wallet accepts (EIP-1271). */
const MAGIC = '0x1626ba7e'

/** A wallet's own check of any digest it signed (an upto permit's Permit2 digest), as the verifiers ask it. */
export type WalletDigestVerifier = (q: {
  address: Address
  hash: Hex
  signature: Hex
}) => Promise<SmartWalletCheck>

export function walletDigestVerifier(client: Client): WalletDigestVerifier {
  return (q) => askWallet(client, q.address, q.hash, q.signature)
}

/** The authorization's EIP-712 digest, asked of its payer's wallet (askWallet). */
export function verifySmartWalletAuthorization(
  client: Client,
  params: AuthorizationTarget & { authorization: TransferAuthorization; signature: Hex },
): Promise<SmartWalletCheck> {
  let hash: Hex
  try {
    hash = hashTypedData(authorizationTypedData(params, params.authorization))
  } catch {
    return Promise.resolve({ ok: false, reason: 'invalid_signature' })
  }
  return askWallet(client, params.authorization.from, hash, params.signature)
}

/**
 * The wallet's answer, asked directly (isValidSignature on the digest): an answer other than the magic value,
 * a revert or no code at all is the wallet's no (invalid_signature); a failed call (the node down, a 5xx, a
 * timeout) is rpc_unavailable, a refusal the payer may retry. viem's verifyTypedData would say false for
 * both: a node's outage would have told a good payer its signature is bad.
 */
async function askWallet(client: Client, from: Address, hash: Hex, wrapped: Hex): Promise<SmartWalletCheck> {
  let signature = wrapped
  try {
    if (isErc6492Signature(signature)) {
      // A counterfactual wallet would have to be deployed through its factory before the token (or Permit2)
      // could ask it; the reference facilitator refuses those too unless told which factories to trust.
      const code = await getCode(client, { address: from })
      if (!code || code === '0x') return { ok: false, reason: 'smart_wallet_not_deployed' }
      signature = parseErc6492Signature(signature).signature
    }
    const answer = await readContract(client, {
      address: from,
      abi: erc1271,
      functionName: 'isValidSignature',
      args: [hash, signature],
    })
    return answer.toLowerCase() === MAGIC
      ? { ok: true, signature }
      : { ok: false, reason: 'invalid_signature' }
  } catch (err) {
    const refused =
      err instanceof BaseError &&
      err.walk(
        (e) => e instanceof ContractFunctionRevertedError || e instanceof ContractFunctionZeroDataError,
      ) !== null
    return { ok: false, reason: refused ? 'invalid_signature' : 'rpc_unavailable' }
  }
}
