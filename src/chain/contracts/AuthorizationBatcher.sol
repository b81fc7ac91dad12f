// SPDX-License-Identifier: MIT
// Settles many EIP-3009 authorizations in one transaction: one signature, one broadcast and one receipt per
// batch instead of per authorization. Stateless and permissionless: transferWithAuthorization pays each
// authorization's own `to` whoever submits it, so calling this contract can move money only where its
// payers already signed it to go. Installed at the address of its CREATE2 deployment through the
// deterministic deployer (0x4e59b44847b379578588920ca78fbf26c0b4956c, salt 0): the same address on every
// chain, so the service finds it by its code and needs no configured address.
pragma solidity ^0.8.24;

interface IERC3009 {
  function transferWithAuthorization(
    address from,
    address to,
    uint256 value,
    uint256 validAfter,
    uint256 validBefore,
    bytes32 nonce,
    uint8 v,
    bytes32 r,
    bytes32 s
  ) external;

  function transferWithAuthorization(
    address from,
    address to,
    uint256 value,
    uint256 validAfter,
    uint256 validBefore,
    bytes32 nonce,
    bytes calldata signature
  ) external;
}

contract AuthorizationBatcher {
  struct Authorization {
    address from;
    address to;
    uint256 value;
    uint256 validAfter;
    uint256 validBefore;
    bytes32 nonce;
    bytes signature;
  }

  /// Gas left before an item is attempted. An item that fails with this much available failed on its own
  /// (bad signature, used nonce, closed window, short balance), never for want of gas.
  uint256 public constant ITEM_GAS = 200_000;

  /// `attempted` items were tried, in order; those after it were not (the transaction ran short of gas) and
  /// are left for another batch. Which attempts succeeded is told by the token's own AuthorizationUsed events.
  event BatchSettled(address indexed token, uint256 attempted, uint256 succeeded);

  function settle(IERC3009 token, Authorization[] calldata items) external {
    uint256 i;
    uint256 succeeded;
    for (; i < items.length; ++i) {
      if (gasleft() < ITEM_GAS) break;
      if (_transfer(token, items[i])) ++succeeded;
    }
    emit BatchSettled(address(token), i, succeeded);
  }

  /// A 65-byte signature goes through the (v, r, s) overload every FiatTokenV2 has; anything else (a smart
  /// wallet's, EIP-1271) through the bytes overload. A revert is caught: one bad item never sinks the batch.
  function _transfer(IERC3009 token, Authorization calldata a) private returns (bool) {
    bytes calldata sig = a.signature;
    if (sig.length != 65) {
      try token.transferWithAuthorization(a.from, a.to, a.value, a.validAfter, a.validBefore, a.nonce, sig) {
        return true;
      } catch {
        return false;
      }
    }
    uint8 v = uint8(sig[64]);
    if (v < 27) v += 27;
    try
      token.transferWithAuthorization(
        a.from,
        a.to,
        a.value,
        a.validAfter,
        a.validBefore,
        a.nonce,
        v,
        bytes32(sig[0:32]),
        bytes32(sig[32:64])
      )
    {
      return true;
    } catch {
      return false;
    }
  }
}
