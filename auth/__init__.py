"""Who a caller is: API keys, end-user and app tokens from identity providers, apps acting for
their users, and this server as an OAuth protected resource. Shared by every edge."""
