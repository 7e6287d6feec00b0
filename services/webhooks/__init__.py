"""The webhooks service: announces a finished job to its webhook_url, signed the Standard Webhooks way."""
