//! [`Cancellable`] as an rmcp `ServerHandler`: every method forwards to the
//! wrapped handler; each request method runs the handler's call through
//! [`Cancellable::race`], so it is what a cancel drops.
//!
//! Being a `ServerHandler` (rather than only an rmcp `Service`) is what lets
//! every rmcp transport serve it — `StreamableHttpService` takes nothing
//! else — and keeps rmcp's own dispatch (protocol checks, result shaping)
//! in front of the wrapper. A method rmcp adds to `ServerHandler` later
//! falls back to rmcp's default here until it is forwarded too.

use std::borrow::Cow;
use std::future::Future;

// `SetLevelRequestParams` is deprecated by rmcp (SEP-2577) but still the
// handler's to answer.
use ::rmcp::model::ConstString as _;
#[allow(deprecated)]
use ::rmcp::model::{
    CallToolRequestMethod, CallToolRequestParams, CallToolResponse, CancelTaskMethod,
    CancelTaskParams, CancelledNotificationParam, CompleteRequestMethod, CompleteRequestParams,
    CompleteResult, CustomNotification, CustomRequest, CustomResult, DiscoverRequestMethod,
    DiscoverResult, GetPromptRequestMethod, GetPromptRequestParams, GetPromptResponse,
    GetSkillRequestMethod, GetSkillRequestParams, GetSkillResult, GetTaskMethod, GetTaskParams,
    GetTaskResult, InitializeRequestParams, InitializeResult, ListPromptsRequestMethod,
    ListPromptsResult, ListResourceTemplatesRequestMethod, ListResourceTemplatesResult,
    ListResourcesRequestMethod, ListResourcesResult, ListSkillsRequestMethod, ListSkillsResult,
    ListToolsRequestMethod, ListToolsResult, PaginatedRequestParams, PingRequestMethod,
    ProgressNotificationParam, ProtocolVersion, ReadResourceDirectoryRequestMethod,
    ReadResourceDirectoryRequestParams, ReadResourceDirectoryResult, ReadResourceRequestMethod,
    ReadResourceRequestParams, ReadResourceResponse, ServerConfig, SetLevelRequestMethod,
    SetLevelRequestParams, SubscribeRequestMethod, SubscribeRequestParams, SubscriptionFilter,
    Tool, UnsubscribeRequestMethod, UnsubscribeRequestParams, UpdateTaskMethod, UpdateTaskParams,
};
use ::rmcp::service::{MaybeSendFuture, NotificationContext, RequestContext, SubscriptionContext};
use ::rmcp::{ErrorData, RoleServer, ServerHandler};

use futures_util::future::Either;

use super::Cancellable;

impl<H> Cancellable<H> {
    /// Declares the tasks extension in `capabilities` when the wrapper runs
    /// tasks ([`Cancellable::tasks`]).
    fn advertise(&self, capabilities: &mut ::rmcp::model::ServerCapabilities) {
        if self.tasks.is_some() {
            super::tasks::advertise(capabilities);
        }
    }
}

/// A request method that takes params: raced.
macro_rules! raced {
    ($name:ident, $params:ty, $result:ty, $method:ty) => {
        fn $name(
            &self,
            request: $params,
            context: RequestContext<RoleServer>,
        ) -> impl Future<Output = Result<$result, ErrorData>> + MaybeSendFuture + '_ {
            self.race(<$method>::VALUE, None, context, move |h, cx| async move {
                h.$name(request, cx).await
            })
        }
    };
}

/// A `tasks/*` method: with [`Cancellable::tasks`], answered by the tasks
/// layer from its store; else the handler's, raced.
macro_rules! task_method {
    ($name:ident, $params:ty, $result:ty, $method:ty) => {
        fn $name(
            &self,
            request: $params,
            context: RequestContext<RoleServer>,
        ) -> impl Future<Output = Result<$result, ErrorData>> + MaybeSendFuture + '_ {
            match self.tasks.clone() {
                Some(tasks) => {
                    Either::Left(self.task_method(tasks, <$method>::VALUE, request, context))
                }
                None => Either::Right(self.race(
                    <$method>::VALUE,
                    None,
                    context,
                    move |h, cx| async move { h.$name(request, cx).await },
                )),
            }
        }
    };
}

// `subscribe`/`unsubscribe` are deprecated by rmcp (legacy-only) but still
// the handler's to answer: they are forwarded like the rest.
#[allow(deprecated)]
impl<H: ServerHandler> ServerHandler for Cancellable<H> {
    fn ping(
        &self,
        context: RequestContext<RoleServer>,
    ) -> impl Future<Output = Result<(), ErrorData>> + MaybeSendFuture + '_ {
        self.race(
            PingRequestMethod::VALUE,
            None,
            context,
            |h, cx| async move { h.ping(cx).await },
        )
    }

    /// Not raced: `initialize` must not be cancelled (and rmcp answers it
    /// during the handshake).
    fn initialize(
        &self,
        request: InitializeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> impl Future<Output = Result<InitializeResult, ErrorData>> + MaybeSendFuture + '_ {
        let answer = self.handler.initialize(request, context);
        async move {
            let mut result = answer.await?;
            self.advertise(&mut result.capabilities);
            Ok(result)
        }
    }

    fn negotiate_initialize(
        &self,
        request: &InitializeRequestParams,
    ) -> Result<InitializeResult, ErrorData> {
        let mut result = self.handler.negotiate_initialize(request)?;
        self.advertise(&mut result.capabilities);
        Ok(result)
    }

    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        self.handler.supported_protocol_versions()
    }

    fn discover(
        &self,
        context: RequestContext<RoleServer>,
    ) -> impl Future<Output = Result<DiscoverResult, ErrorData>> + MaybeSendFuture + '_ {
        let answer = self.race(
            DiscoverRequestMethod::VALUE,
            None,
            context,
            |h, cx| async move { h.discover(cx).await },
        );
        async move {
            let mut result = answer.await?;
            self.advertise(&mut result.capabilities);
            Ok(result)
        }
    }

    raced!(
        complete,
        CompleteRequestParams,
        CompleteResult,
        CompleteRequestMethod
    );
    raced!(set_level, SetLevelRequestParams, (), SetLevelRequestMethod);
    raced!(
        get_prompt,
        GetPromptRequestParams,
        GetPromptResponse,
        GetPromptRequestMethod
    );
    raced!(
        list_prompts,
        Option<PaginatedRequestParams>,
        ListPromptsResult,
        ListPromptsRequestMethod
    );
    raced!(
        list_resources,
        Option<PaginatedRequestParams>,
        ListResourcesResult,
        ListResourcesRequestMethod
    );
    raced!(
        list_resource_templates,
        Option<PaginatedRequestParams>,
        ListResourceTemplatesResult,
        ListResourceTemplatesRequestMethod
    );
    raced!(
        read_resource,
        ReadResourceRequestParams,
        ReadResourceResponse,
        ReadResourceRequestMethod
    );

    fn accepted_subscription_filter(
        &self,
        requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        self.handler.accepted_subscription_filter(requested)
    }

    /// Not raced: a `subscriptions/listen` stream lives until the client
    /// or the session ends it, which rmcp's subscription context reports.
    fn listen(
        &self,
        context: SubscriptionContext,
    ) -> impl Future<Output = Result<(), ErrorData>> + MaybeSendFuture + '_ {
        self.handler.listen(context)
    }

    raced!(
        subscribe,
        SubscribeRequestParams,
        (),
        SubscribeRequestMethod
    );
    raced!(
        unsubscribe,
        UnsubscribeRequestParams,
        (),
        UnsubscribeRequestMethod
    );
    /// Raced like the rest, with the tool's name for the layers' per-tool
    /// limits; with [`Cancellable::tasks`], under the tasks layer too.
    fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> impl Future<Output = Result<CallToolResponse, ErrorData>> + MaybeSendFuture + '_ {
        if let Some(tasks) = self.tasks.clone() {
            return Either::Left(self.task_tool_call(tasks, request, context));
        }
        let tool = Some(request.name.as_ref().into());
        Either::Right(self.race(
            CallToolRequestMethod::VALUE,
            tool,
            context,
            move |h, cx| async move { h.call_tool(request, cx).await },
        ))
    }
    raced!(
        list_tools,
        Option<PaginatedRequestParams>,
        ListToolsResult,
        ListToolsRequestMethod
    );

    fn get_tool(&self, name: &str) -> Option<Tool> {
        self.handler.get_tool(name)
    }

    fn on_custom_request(
        &self,
        request: CustomRequest,
        context: RequestContext<RoleServer>,
    ) -> impl Future<Output = Result<CustomResult, ErrorData>> + MaybeSendFuture + '_ {
        let method = request.method.clone();
        self.race(&method, None, context, move |h, cx| async move {
            h.on_custom_request(request, cx).await
        })
    }

    fn on_cancelled(
        &self,
        notification: CancelledNotificationParam,
        context: NotificationContext<RoleServer>,
    ) -> impl Future<Output = ()> + MaybeSendFuture + '_ {
        // rmcp has fired the request's ct already; this is for the log.
        tracing::info!(
            request_id = ?notification
                .request_id
                .as_ref()
                .map(super::request::convert::<tower_mcp_cancel::jsonrpc::RequestId>),
            reason = %tower_mcp_cancel::CancelReason::peer(notification.reason.as_deref()),
            "peer cancelled a request"
        );
        self.handler.on_cancelled(notification, context)
    }

    fn on_progress(
        &self,
        notification: ProgressNotificationParam,
        context: NotificationContext<RoleServer>,
    ) -> impl Future<Output = ()> + MaybeSendFuture + '_ {
        self.handler.on_progress(notification, context)
    }

    fn on_initialized(
        &self,
        context: NotificationContext<RoleServer>,
    ) -> impl Future<Output = ()> + MaybeSendFuture + '_ {
        self.handler.on_initialized(context)
    }

    fn on_roots_list_changed(
        &self,
        context: NotificationContext<RoleServer>,
    ) -> impl Future<Output = ()> + MaybeSendFuture + '_ {
        self.handler.on_roots_list_changed(context)
    }

    fn on_custom_notification(
        &self,
        notification: CustomNotification,
        context: NotificationContext<RoleServer>,
    ) -> impl Future<Output = ()> + MaybeSendFuture + '_ {
        self.handler.on_custom_notification(notification, context)
    }

    fn get_info(&self) -> ServerConfig {
        let mut info = self.handler.get_info();
        self.advertise(&mut info.capabilities);
        info
    }

    task_method!(get_task, GetTaskParams, GetTaskResult, GetTaskMethod);
    task_method!(update_task, UpdateTaskParams, (), UpdateTaskMethod);
    task_method!(cancel_task, CancelTaskParams, (), CancelTaskMethod);
    raced!(
        list_skills,
        Option<PaginatedRequestParams>,
        ListSkillsResult,
        ListSkillsRequestMethod
    );
    raced!(
        get_skill,
        GetSkillRequestParams,
        GetSkillResult,
        GetSkillRequestMethod
    );
    raced!(
        read_resource_directory,
        ReadResourceDirectoryRequestParams,
        ReadResourceDirectoryResult,
        ReadResourceDirectoryRequestMethod
    );
}
