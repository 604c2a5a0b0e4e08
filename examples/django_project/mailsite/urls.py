"""The example's URLs: the Django admin, periodic tasks included."""

from django.contrib import admin
from django.urls import path

urlpatterns = [path("admin/", admin.site.urls)]
