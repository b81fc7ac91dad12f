// Smart-wallet payers (ERC-1271 contract wallets, ERC-6492 wrapped signatures): the signature is checked by
// the wallet itself, through an eth_call. Only the fallback after ecrecover did not give `from`, so EOA
// payers (almost all) never pay for an RPC here.
import { type Address, type Client, type Hex, isErc6492Signature, parseErc6492Signature } from 'viem'
import { getCode, verifyTypedData } from 'viem/actions'
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

export async function verifySmartWalletAuthorization(
  client: Client,
  params: AuthorizationTarget & { authorization: TransferAuthorization; signature: Hex },
): Promise<SmartWalletCheck> {
  const from: Address = params.authorization.from
  let signature = params.signature
  try {
    if (isErc6492Signature(signature)) {
      // A counterfactual wallet would have to be deployed through its factory before USDC could ask it;
      // the reference facilitator refuses those too unless told which factories to trust.
      const code = await getCode(client, { address: from })
      if (!code || code === '0x') return { ok: false, reason: 'smart_wallet_not_deployed' }
      signature = parseErc6492Signature(signature).signature
    }
    const valid = await verifyTypedData(client, {
      address: from,
      ...authorizationTypedData(params, params.authorization),
      signature,
    })
    return valid ? { ok: true, signature } : { ok: false, reason: 'invalid_signature' }
  } catch {
    return { ok: false, reason: 'rpc_unavailable' }
  }
}
